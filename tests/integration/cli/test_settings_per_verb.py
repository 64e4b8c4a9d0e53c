"""Every VDK setting of the plugin is read the same way by every verb (docs/job-format.md, "Cluster-wide settings"):
`[ml-training]` of the job, else the environment (VDK_ML_TRAINING_*), else `[vdk]` of the job's config.ini,
else the default. Through the real vdk CLI, the real `kubernetes` client and the fake API server, whose
kubeconfig's current context leads nowhere: only the context the settings name reaches the cluster, and
only the namespace they name has the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support import cluster_state as cs
from tests.support.fake_apiserver import TOKEN
from tests.support.fake_apiserver import USER
from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import HAS_CONTROL_CLI
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run

pytestmark = pytest.mark.usefixtures("isolated_environment")

NAMESPACE = "team-a"  # the run's namespace: not the kube context's ("ml")
CONTEXT = "team-cluster"  # the context that reaches the fake; the current one does not
TEAM = "vision"
# Where a setting is given: the environment or [vdk] of config.ini.
SOURCES = ("environment", "vdk-section")
CONTROL_CLI = [
    False,
    pytest.param(
        True,
        marks=[
            pytest.mark.needs_control_cli,
            pytest.mark.skipif(not HAS_CONTROL_CLI, reason="needs vdk-plugin-control-cli (run in .venv-cs)"),
        ],
    ),
]


def two_context_kubeconfig(fake, path: Path) -> Path:
    """Current context `dead` (a port nothing listens on), and CONTEXT, which reaches `fake`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "fake", "cluster": {"server": fake.url}},
            {"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}},
        ],
        "users": [{"name": USER, "user": {"token": TOKEN}}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": "fake", "user": USER, "namespace": "ml"}},
            {"name": "dead", "context": {"cluster": "dead", "user": USER, "namespace": "ml"}},
        ],
        "current-context": "dead",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def fake(cluster, tmp_path, monkeypatch):
    fake = cluster(pytorchjob=True, namespaces=("default", "ml", NAMESPACE))[0]
    monkeypatch.setenv("KUBECONFIG", str(two_context_kubeconfig(fake, tmp_path / "kubeconfig")))
    return fake


def configure(source: str, monkeypatch, values: dict[str, str]) -> str:
    """`values` (VDK keys) in the environment, or as the [vdk] section to write into config.ini."""
    if source == "environment":
        for key, value in values.items():
            monkeypatch.setenv(f"VDK_{key.upper()}", value)
        return ""
    return "\n[vdk]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())


def deployed_run(tmp_path: Path, job: str = "settings-job") -> str:
    """A run of `job` (team TEAM) in NAMESPACE, applied through CONTEXT."""
    spec = make_spec(tmp_path / "deployed", name=job, team=TEAM, nodes="1", gpus_per_node="0")
    client = KubeClient(CONTEXT, NAMESPACE)
    run = client.apply(render_run(spec, IMAGE, make_run(spec), NAMESPACE, "job"))[0]
    return run["metadata"]["name"]


def verb_job(tmp_path: Path, vdk_section: str, job: str = "settings-job", ml: str = "") -> Path:
    return write_job(tmp_path / "jobs", job, team=TEAM, ml=ml + "gpus_per_node = 0\n", extra=vdk_section)


def ok(result):
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.stdout}\n{result.stderr}\n{result.exception!r}"
    return result


# --- list, show, execute, delete --------------------------------------------------------------------------


@pytest.mark.parametrize("control_cli", CONTROL_CLI)
@pytest.mark.parametrize("source", SOURCES)
def test_show_execute_and_delete_of_a_job_directory_use_its_namespace_and_context(
    source, control_cli, fake, tmp_path, monkeypatch
):
    monkeypatch.delenv("VDK_CONTROL_SERVICE_REST_API_URL", raising=False)
    run = deployed_run(tmp_path)
    pod = fake.add("pods", cs.rank_pod(fake.stored("jobs", NAMESPACE)[0], "job", 0, cs.running()), NAMESPACE)
    fake.set_log(pod["metadata"]["name"], "pytorch", "hello from rank 0\n", namespace=NAMESPACE)
    settings = {"ml_training_namespace": NAMESPACE, "ml_training_kube_context": CONTEXT}
    job = verb_job(tmp_path, configure(source, monkeypatch, settings))

    shown = json.loads(ok(vdk("show", "-p", str(job), "-o", "json", control_cli=control_cli)).stdout)
    assert [r["name"] for r in shown["runs"]] == [run] and shown["latest"]["run"]["namespace"] == NAMESPACE
    listed = json.loads(ok(vdk("execute", "--list", "-p", str(job), "-o", "json", control_cli=control_cli)).stdout)
    assert [r["name"] for r in listed] == [run]
    logs = ok(vdk("execute", "--logs", "-p", str(job), control_cli=control_cli)).stdout
    assert "hello from rank 0" in logs
    ok(vdk("delete", "-p", str(job), "--yes", control_cli=control_cli))
    assert fake.stored("jobs", NAMESPACE) == []


@pytest.mark.parametrize("control_cli", CONTROL_CLI)
@pytest.mark.parametrize("source", SOURCES)
def test_list_and_show_in_a_job_directory_use_its_namespace_and_context(
    source, control_cli, fake, tmp_path, monkeypatch
):
    monkeypatch.delenv("VDK_CONTROL_SERVICE_REST_API_URL", raising=False)
    run = deployed_run(tmp_path)
    settings = {"ml_training_namespace": NAMESPACE, "ml_training_kube_context": CONTEXT}
    job = verb_job(tmp_path, configure(source, monkeypatch, settings))
    monkeypatch.chdir(job)

    listed = json.loads(ok(vdk("list", "-o", "json", control_cli=control_cli)).stdout)
    assert [(e["job_name"], e["namespace"], e["latest_run"]) for e in listed] == [("settings-job", NAMESPACE, run)]
    shown = json.loads(ok(vdk("show", "-o", "json", control_cli=control_cli)).stdout)
    assert [r["name"] for r in shown["runs"]] == [run]


@pytest.mark.parametrize("control_cli", CONTROL_CLI)
def test_verbs_given_only_a_name_read_the_environment(control_cli, fake, tmp_path, monkeypatch):
    """-n JOB outside a job directory: no config.ini to read, the environment applies."""
    monkeypatch.delenv("VDK_CONTROL_SERVICE_REST_API_URL", raising=False)
    run = deployed_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("VDK_ML_TRAINING_KUBE_CONTEXT", CONTEXT)
    shown = json.loads(ok(vdk("show", "-n", "settings-job", "-o", "json", control_cli=control_cli)).stdout)
    assert [r["name"] for r in shown["runs"]] == [run]
    listed = json.loads(ok(vdk("list", "-a", "-o", "json", control_cli=control_cli)).stdout)
    assert [e["latest_run"] for e in listed if e["kind"] == "ml-training"] == [run]
    ok(vdk("delete", "-n", "settings-job", "-t", TEAM, "--yes", control_cli=control_cli))
    assert fake.stored("jobs", NAMESPACE) == []


def test_the_environment_wins_over_vdk_section_and_ml_training_over_both(fake, tmp_path, monkeypatch):
    run = deployed_run(tmp_path)
    # [vdk] names a namespace without the run; the environment the right one
    vdk_section = configure("vdk-section", monkeypatch, {"ml_training_namespace": "ml"})
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("VDK_ML_TRAINING_KUBE_CONTEXT", CONTEXT)
    job = verb_job(tmp_path, vdk_section)
    shown = json.loads(ok(vdk("show", "-p", str(job), "-o", "json")).stdout)
    assert [r["name"] for r in shown["runs"]] == [run]
    # [ml-training] namespace wins over the environment: there are no runs there
    other = verb_job(tmp_path, vdk_section, job="settings-job", ml="namespace = default\n")
    result = vdk("show", "-p", str(other))
    assert result.exit_code == 1 and "there are no runs of settings-job" in result.stderr
    assert "in namespace default" in result.stderr


def test_an_unknown_plugin_key_in_vdk_section_is_an_error_with_the_fix(fake, tmp_path):
    job = verb_job(tmp_path, "\n[vdk]\nml_training_namspace = team-a\n")
    for args in (["show", "-p", str(job)], ["deploy", "-p", str(job), "--dry-run"], ["run", str(job)]):
        result = vdk(*args)
        assert result.exit_code != 0
        assert "[vdk] ml_training_namspace: unknown VDK configuration key" in result.output + result.stderr
        assert "did you mean `ml_training_namespace`?" in result.output + result.stderr


def test_a_bad_value_in_vdk_section_names_that_line(fake, tmp_path):
    job = verb_job(tmp_path, "\n[vdk]\nml_training_namespace = Team_A\n")
    result = vdk("deploy", "-p", str(job), "--dry-run")
    assert result.exit_code == 1
    assert f"the value of [vdk] ml_training_namespace of {job / 'config.ini'}: 'Team_A'" in result.stderr
    assert "`ml_training_namespace = ml-team` (in [vdk], or `namespace = ...` in [ml-training])" in result.stderr


# --- deploy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
def test_deploy_uses_the_namespace_registry_context_and_base_image_of_the_settings(
    source, fake, registry, base_image, tmp_path, monkeypatch
):
    settings = {
        "ml_training_namespace": NAMESPACE,
        "ml_training_kube_context": CONTEXT,
        "ml_training_registry": f"{registry.host}/from-settings",
        "ml_training_base_image": base_image,
    }
    job = verb_job(
        tmp_path, configure(source, monkeypatch, settings), ml="base_python_version = 3.11\nbase_provides = torch\n"
    )
    result = ok(vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json"))
    out = json.loads(result.stdout)
    assert (out["namespace"], out["context"]) == (NAMESPACE, CONTEXT)
    assert out["image"].startswith(f"{registry.host}/from-settings/settings-job@sha256:")
    assert fake.run_objects(NAMESPACE) == sorted([f"PyTorchJob/{out['run']}", f"ConfigMap/{out['run']}-record"])
    assert fake.run_objects("ml") == []
    origin = (
        "VDK_ML_TRAINING_NAMESPACE"
        if source == "environment"
        else f"[vdk] ml_training_namespace of {job / 'config.ini'}"
    )
    assert f"  namespace  {NAMESPACE}  (" in result.stderr and origin in result.stderr
    record = json.loads(fake.stored("configmaps", NAMESPACE)[0]["data"]["spec.json"])
    assert record["base_image"] == base_image


def test_the_base_image_of_vdk_section_is_that_of_vdk_run(tmp_path):
    """`vdk run --full JOB`: vdk itself loads [vdk] only when the job follows `run`; the plugin reads it anyway."""
    job = verb_job(tmp_path, "\n[vdk]\nml_training_base_image = python:3.11\n")
    for args in (["run", str(job)], ["run", "--full", str(job)]):
        result = vdk(*args)
        assert result.exit_code != 0
        assert "`import torch` needs torch" in result.output
        assert "the base image python:3.11 does not have it" in result.output
