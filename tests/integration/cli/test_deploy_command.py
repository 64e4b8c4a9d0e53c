"""`vdk deploy` of ml-training jobs end to end: the real vdk CLI, a real registry process, the real
`kubernetes` client against the HTTP-level fake API server, a real smoke run.

What a user relies on: --dry-run prints only valid manifests and contacts nothing; a deploy creates
exactly the run's objects with the image pinned by digest; a failure at any stage (smoke check,
build, apply) leaves nothing in the cluster; data jobs are not taken over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import requests
import yaml
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support import crd_schema
from tests.support.jobs import write_job
from tests.support.native import native_errors
from tests.support.wheels import make_wheel
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.job import teams

ROOT = Path(__file__).resolve().parents[3]
VDK = Path(sys.executable).parent / "vdk"
DDP_EXAMPLE = ROOT / "examples" / "ddp-nccl"

TRAIN = """\
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100):
        loss = model(torch.randn(8, 4, device="cuda")).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


pytestmark = pytest.mark.usefixtures("isolated_environment")


def deploy_job(root: Path, base_image: str, train: str = TRAIN, name: str = "tiny-train", extra: str = "") -> Path:
    return write_job(
        root,
        name,
        team="ml-platform",
        # the test bases stand in for a PyTorch base: they say they have torch
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\nnodes = 2\n"
        "gpus_per_node = 1\nsmoke_timeout = 2m\n" + extra,
        files={"train.py": train},
    )


def vdk(*args: str):
    return CliEntryBasedTestRunner(plugin).invoke(list(args))


def created_nothing(fake) -> bool:
    """The cluster was only read and asked (dry runs, access reviews): nothing was created or deleted."""
    return all(
        method == "GET" or query.get("dryRun") == "All" or path.endswith("/selfsubjectaccessreviews")
        for method, path, query in fake.requests
    )


def repository_tags(registry, repository: str) -> list[str]:
    answer = requests.get(f"{registry.url}/v2/{repository}/tags/list", timeout=5)
    return [] if answer.status_code == 404 else (answer.json().get("tags") or [])


# --- dry run -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend, kinds",
    [
        ("pytorchjob", ["PyTorchJob", "ConfigMap"]),
        ("trainjob", ["TrainJob", "ConfigMap"]),
        ("job", ["Job", "Service", "ConfigMap"]),
    ],
)
def test_dry_run_of_the_ddp_example_prints_valid_manifests_only(backend, kinds, cluster, monkeypatch):
    fake = cluster(pytorchjob=True, trainer_mechanism="runtimePatches")[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    done = subprocess.run(
        [str(VDK), "deploy", "-p", str(DDP_EXAMPLE), "--dry-run", "--backend", backend],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("apiVersion: ")  # stdout is nothing but YAML, not even a blank line
    manifests = list(yaml.safe_load_all(done.stdout))
    assert [m["kind"] for m in manifests] == kinds
    for manifest in manifests:
        if manifest["kind"] == "PyTorchJob":
            assert crd_schema.pytorchjob_schema().errors(manifest) == []
        elif manifest["kind"] == "TrainJob":
            assert crd_schema.trainjob_schema("runtimePatches").errors(manifest) == []
        else:
            assert native_errors(manifest, "V1" + manifest["kind"]) == []
    image = next(c["image"] for c in _containers(manifests[0]))
    assert image.startswith("127.0.0.1:9/nothing-listens-here/ddp-nccl:")  # the reference a build would push
    assert "Image for job ddp-nccl" in done.stderr and "code" in done.stderr  # the plan, on stderr
    assert fake.requests == []  # contacted nothing


def _containers(manifest: dict) -> list[dict]:
    kind = manifest["kind"]
    if kind == "PyTorchJob":
        return [
            c for r in manifest["spec"]["pytorchReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]
        ]
    if kind == "TrainJob":
        return [manifest["spec"]["trainer"]]
    return manifest["spec"]["template"]["spec"]["containers"]


@pytest.mark.slow
def test_dry_run_on_a_base_with_only_python3_starts_python3_in_every_backend_and_says_why(
    tmp_path, local_bases, monkeypatch
):
    """A base no table knows and no key describes: the dry run reads it and names its interpreter."""
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = tmp_path / "debian-job"
    job.mkdir()
    (job / "config.ini").write_text(
        f"[job]\ntype = ml-training\n[ml-training]\nbase_image = {local_bases.debian}\n"
        "nodes = 2\nprocs_per_node = 2\ngpus_per_node = 0\nbase_provides = torch\n"  # (not the interpreter)
    )
    (job / "train.py").write_text(TRAIN)
    for backend in ("pytorchjob", "trainjob", "job"):
        done = subprocess.run(
            [str(VDK), "deploy", "-p", str(job), "--dry-run", "--backend", backend],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        containers = _containers(next(yaml.safe_load_all(done.stdout)))
        assert {c["command"][0] for c in containers} == {"python3"}, backend
        why = "`python3` on the image's PATH: /usr/bin/python3 -> /usr/bin/python3.11; the image has no `python`"
        assert f"python     python3: {why}" in done.stderr
        assert f"command    python3 -m {layout.LAUNCHER_MODULE}" in done.stderr
    assert "Reading base image" not in done.stderr  # read by the first dry run, then from the cache


def test_an_import_the_image_lacks_stops_a_dry_run_and_a_deploy_before_anything_else(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = deploy_job(tmp_path, "python:3.11", train="import yaml\n" + TRAIN, name="needs-yaml")
    (job / "requirements.txt").write_text("numpy\n")
    result = vdk("deploy", "-p", str(job), "--dry-run")
    assert result.exit_code == 1 and result.stdout == ""
    assert "needs-yaml imports 1 module its image would not have" in result.stderr
    assert "train.py:1: `import yaml` needs PyYAML" in result.stderr and "--skip-import-check" in result.stderr
    # a deploy stops there too: before the cluster (none listens) is ever asked
    result = vdk("deploy", "-p", str(job), "--build-only")
    assert result.exit_code == 1 and "`import yaml` needs PyYAML" in result.stderr
    assert "Nothing was built or deployed" in result.stderr

    skipped = vdk("deploy", "-p", str(job), "--dry-run", "--skip-import-check")
    assert skipped.exit_code == 0, skipped.stderr
    (job / "requirements.txt").write_text("numpy\nPyYAML\n")
    assert vdk("deploy", "-p", str(job), "--dry-run").exit_code == 0


def test_dry_run_with_a_bad_job_name_says_how_to_fix_it(tmp_path):
    job = deploy_job(tmp_path, "python:3.11", name="Tiny_Train")
    result = vdk("deploy", "-p", str(job), "--dry-run")
    assert result.exit_code == 1
    assert "cannot be a Kubernetes name" in result.stderr and "deploy with `-n tiny-train`" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_dry_run_says_where_the_team_namespace_and_queue_come_from(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_NAMESPACES", "ml-platform:ml-platform-ns")
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_QUEUES", "ml-platform:platform-gpus, nlp:nlp-gpus")
    job = deploy_job(tmp_path, "python:3.11", name="mapped-job")
    result = vdk("deploy", "-p", str(job), "--dry-run", "--backend", backend)
    assert result.exit_code == 0, result.output
    manifests = list(yaml.safe_load_all(result.stdout))
    assert {m["metadata"]["namespace"] for m in manifests} == {"ml-platform-ns"}
    assert manifests[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "platform-gpus"
    assert manifests[0]["metadata"]["labels"]["vdk.io/team"] == "ml-platform"
    assert (
        "Where it runs:\n"
        f"  team       ml-platform  ([owner] team of {job / 'config.ini'})\n"
        "  namespace  ml-platform-ns  (ml_training_team_namespaces for team ml-platform)\n"
        "  queue      platform-gpus  (ml_training_team_queues for team ml-platform)\n"
    ) in result.stderr
    # -t picks another team, and with it that team's queue; a job's own key wins over the mapping
    other = vdk("deploy", "-p", str(job), "--dry-run", "--backend", backend, "-t", "nlp")
    assert other.exit_code == 0, other.output
    assert (
        "  team       nlp  (-t)\n" in other.stderr and "  queue      nlp-gpus  (ml_training_team_queues" in other.stderr
    )
    assert f"  namespace  default  ({NO_NAMESPACE})" in other.stderr
    own = write_job(
        tmp_path,
        "own-job",
        team="ml-platform",
        ml="base_image = python:3.11\nbase_provides = torch\nnamespace = ml-own\n",
    )
    result = vdk("deploy", "-p", str(own), "--dry-run", "--backend", backend)
    assert result.exit_code == 0, result.output
    assert {m["metadata"]["namespace"] for m in yaml.safe_load_all(result.stdout)} == {"ml-own"}
    assert f"  namespace  ml-own  ([ml-training] namespace of {own / 'config.ini'})" in result.stderr


NO_NAMESPACE = "no namespace is set and no kube context has one"


def test_a_job_without_a_team_is_deployed_as_the_default_team_s(tmp_path):
    job = write_job(tmp_path, "no-owner", ml="base_image = python:3.11\nbase_provides = torch\n")
    result = vdk("deploy", "-p", str(job), "--dry-run", "--backend", "job")
    assert result.exit_code == 0, result.output
    assert "vdk.io/team" not in next(yaml.safe_load_all(result.stdout))["metadata"]["labels"]
    assert "  team       none (no -t, [owner] team or default team)" in result.stderr
    teams.write_default_team("nlp")
    result = vdk("deploy", "-p", str(job), "--dry-run", "--backend", "job")
    assert result.exit_code == 0, result.output
    assert next(yaml.safe_load_all(result.stdout))["metadata"]["labels"]["vdk.io/team"] == "nlp"
    assert "  team       nlp  (your default team, `vdk set-default`)" in result.stderr


def test_a_team_that_cannot_be_a_label_value_stops_the_deploy_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = write_job(tmp_path, "bad-team-job", team="R&D/Vision", ml="base_image = python:3.11\nbase_provides = torch\n")
    for args in (["--dry-run"], []):
        result = vdk("deploy", "-p", str(job), *args)
        assert result.exit_code == 1 and result.stdout == ""
        assert (
            f"Error: {job / 'config.ini'} [owner] team: team 'R&D/Vision' cannot be a Kubernetes label value"
            in result.stderr
        )
        assert "Fix: write `team = R-D-Vision` under [owner] (or deploy with `-t R-D-Vision`)" in result.stderr
        assert "smoke" not in result.stderr and "Image for job" not in result.stderr  # before any work
    result = vdk("deploy", "-p", str(job), "--dry-run", "-t", "Vision Research")  # normalised: Vision-Research
    assert result.exit_code == 0, result.output
    assert next(yaml.safe_load_all(result.stdout))["metadata"]["labels"]["vdk.io/team"] == "Vision-Research"
    result = vdk("deploy", "-p", str(job), "--dry-run", "-t", "a" * 64)
    assert result.exit_code == 1 and "-t: team 'aaaa" in result.stderr and "longer than the 63" in result.stderr


# --- deploy ------------------------------------------------------------------------------------


def test_deploy_builds_pushes_and_creates_exactly_the_run(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image)
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "tinydep", "1.0", requires=("helperdep>=2",))
    make_wheel(wheels, "helperdep", "2.0")
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\ntinydep\n")

    result = vdk("deploy", "-p", str(job), "-r", "first try", "-o", "json")

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # with -o json, stdout is one JSON document
    assert out["backend"] == "pytorchjob" and out["namespace"] == "ml"
    assert "smoke run PASSED" in result.stderr  # the pre-flight smoke check ran first
    # the dependency check beside it says what it does, and the build then says the layer was built, not reused
    assert "Pre-flight: dependencies: installing requirements.txt" in result.stderr
    assert "Pre-flight: dependencies: 3 packages, " in result.stderr and ", built in " in result.stderr
    assert "Pre-flight Dependencies" not in result.stderr  # one spelling
    assert "ago by this command (its pre-flight check)" in result.stderr and "unchanged" not in result.stderr
    run = out["run"]
    assert fake.run_objects() == sorted([f"PyTorchJob/{run}", f"ConfigMap/{run}-record"])
    pytorchjob = fake.stored("pytorchjobs")[0]
    image = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
    assert image == out["image"] and "@sha256:" in image
    repository, digest = image.split("/", 1)[1].split("@")
    answer = requests.head(
        f"{registry.url}/v2/{repository}/manifests/{digest}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        timeout=5,
    )
    assert answer.status_code == 200  # the cluster runs exactly what was pushed
    annotations = pytorchjob["metadata"]["annotations"]
    assert "first try" in annotations.values()
    assert digest in annotations.values()
    # what the dependency layer installed; a GPU job also holds the GPU sampler's NVML binding (the plugin's)
    resolved = {"helperdep": "2.0", "nvidia-ml-py": metadata.version("nvidia-ml-py"), "tinydep": "1.0"}
    assert out["dependencies"] == resolved
    (record,) = fake.stored("configmaps")
    assert json.loads(record["data"]["dependencies.json"]) == resolved
    assert json.loads(record["data"]["provenance.json"])["git_commit"] is None  # not in git: said so, not invented
    assert out["git_commit"] is None and out["git_dirty"] is None


@pytest.mark.parametrize("mechanism", ["podSpecOverrides", "podTemplateOverrides", "runtimePatches"])
def test_trainjob_pod_changes_follow_the_installed_trainer(
    mechanism, tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True, trainer_mechanism=mechanism)[0]  # the fake validates with that version's schema
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name=f"trainer-{mechanism.lower()}")
    result = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["backend"] == "trainjob"
    (trainjob,) = fake.stored("trainjobs")
    assert mechanism in trainjob["spec"]


def test_a_team_s_namespace_and_queue_from_vdk_configuration(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True, namespaces=("default", "ml", "ml-platform-ns"))[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_NAMESPACES", "ml-platform:ml-platform-ns, nlp:ml-nlp")
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_QUEUES", "ml-platform:platform-gpus")
    job = deploy_job(tmp_path, base_image, name="team-job")  # [owner] team = ml-platform, no namespace or queue key
    result = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["namespace"], out["job_team"]) == ("ml-platform-ns", "ml-platform")
    assert fake.run_objects("ml-platform-ns") == sorted([f"PyTorchJob/{out['run']}", f"ConfigMap/{out['run']}-record"])
    assert fake.run_objects("ml") == []
    (pytorchjob,) = fake.stored("pytorchjobs", "ml-platform-ns")
    assert pytorchjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "platform-gpus"
    assert pytorchjob["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "platform-gpus"
    assert "  namespace  ml-platform-ns  (ml_training_team_namespaces for team ml-platform)" in result.stderr
    # the verbs find the team's run in its namespace
    shown = vdk("show", "-n", "team-job", "-t", "ml-platform", "-o", "json")
    assert shown.exit_code == 0, shown.output
    assert [r["name"] for r in json.loads(shown.stdout)["runs"]] == [out["run"]]


def test_build_only_prints_the_digest_reference_last(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name="build-only-job")
    result = vdk("deploy", "-p", str(job), "--build-only", "--skip-smoke")
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{registry.host}/team/build-only-job@sha256:")
    assert fake.requests == [] and fake.run_objects() == []  # submits nothing


def test_failed_smoke_check_builds_and_deploys_nothing(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    broken = TRAIN.replace("loss.backward()", "loss.backward()\n        raise ValueError('typo in the training loop')")
    job = deploy_job(tmp_path, base_image, train=broken, name="broken-job")
    result = vdk("deploy", "-p", str(job))
    assert result.exit_code == 1
    assert "typo in the training loop" in result.stderr
    assert "Nothing was built or deployed" in result.stderr
    assert repository_tags(registry, "team/broken-job") == []
    assert fake.run_objects() == []
    assert created_nothing(fake)  # the cluster was only asked what it serves and would accept


def test_failed_build_creates_nothing_in_the_cluster(tmp_path, registry, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, f"{registry.host}/base/missing:1", name="no-base-job")
    result = vdk("deploy", "-p", str(job), "--skip-smoke")
    assert result.exit_code == 1
    assert "base/missing" in result.stderr
    assert fake.run_objects() == []
    assert created_nothing(fake)


def test_failed_apply_leaves_nothing_behind(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    fake.fail(
        "POST",
        "configmaps",
        403,
        "Forbidden",
        'configmaps is forbidden: User "ada" cannot create resource "configmaps"',
    )
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name="forbidden-job")
    result = vdk("deploy", "-p", str(job), "--skip-smoke")
    assert result.exit_code == 1
    assert "configmaps" in result.stderr and "Fix:" in result.stderr
    assert fake.run_objects() == []  # the PyTorchJob created before the failure was removed


def test_a_run_whose_create_answer_was_lost_is_adopted_not_deployed_twice(
    tmp_path, registry, base_image, cluster, monkeypatch, fast_retries
):
    fake = cluster(pytorchjob=True)[0]
    fake.drop("POST", "pytorchjobs", after=True)  # created; the answer never comes
    fake.fail("POST", "configmaps", 429, "TooManyRequests", "Too many requests, please try again later.", 1, 1)
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name="lost-reply")
    result = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run"]
    assert fake.run_objects() == sorted([f"PyTorchJob/{run}", f"ConfigMap/{run}-record"])  # once, with its record
    assert fake.requests_to("POST", "/pytorchjobs") == 1 and fake.requests_to("POST", "/configmaps") == 2
    assert f"create PyTorchJob {run} in namespace ml, but it was done: PyTorchJob {run} exists" in result.stderr
    assert f"answered 429 TooManyRequests to create ConfigMap {run}-record in namespace ml (Retry-After 1 s)" in (
        result.stderr
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_deploy_stopped_while_its_run_is_created_leaves_nothing(
    tmp_path, registry, base_image, cluster, monkeypatch, sig
):
    fake = cluster(pytorchjob=True)[0]
    fake.delay("POST", "pytorchjobs", 60)  # created at once, answered a minute later
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name=f"stopped-{sig.name.lower()}")
    process = subprocess.Popen(
        [str(VDK), "deploy", "-p", str(job), "--skip-smoke"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not fake.stored("pytorchjobs") and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    if not fake.stored("pytorchjobs"):  # it should exist (after its record), its answer under way: say why not
        process.kill()
        out, err = process.communicate(timeout=60)
        pytest.fail(f"no PyTorchJob was created (exit {process.returncode}):\n{err}\n{out}")
    process.send_signal(sig)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + sig, err
    assert fake.run_objects() == []  # deleted again: no run without its record, no run the user does not know of
    assert f"vdk deploy interrupted by {sig.name}." in err
    assert "nothing of it is left in the cluster (deleted PyTorchJob/" in err and out == ""


def test_unreachable_cluster_fails_before_smoke_and_build(tmp_path, registry, base_image, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dead",
                "clusters": [{"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = deploy_job(tmp_path, base_image, name="unreachable-job")
    result = vdk("deploy", "-p", str(job))
    assert result.exit_code == 1
    assert "127.0.0.1:9" in result.stderr
    assert "smoke run stopped: the cluster check failed" in result.stderr  # found during the smoke run
    assert "smoke run PASSED" not in result.stderr and "Nothing was built or deployed" in result.stderr
    assert repository_tags(registry, "team/unreachable-job") == []


def test_missing_namespace_fails_before_smoke_and_build(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", "nope")
    job = deploy_job(tmp_path, base_image, name="no-namespace-job")
    result = vdk("deploy", "-p", str(job))
    assert result.exit_code == 1
    assert "the namespace nope does not exist" in result.stderr and "create namespace nope" in result.stderr
    assert "smoke run stopped: the cluster check failed" in result.stderr and "smoke run PASSED" not in result.stderr
    assert repository_tags(registry, "team/no-namespace-job") == [] and fake.run_objects("nope") == []


def test_dry_run_and_build_only_exclude_each_other(tmp_path):
    job = deploy_job(tmp_path, "python:3.11", name="both-job")
    result = vdk("deploy", "-p", str(job), "--dry-run", "--build-only")
    assert result.exit_code == 1 and "exclude each other" in result.stderr and result.stdout == ""


def test_missing_registry_is_a_clear_error(tmp_path):
    job = deploy_job(tmp_path, "python:3.11", name="no-registry-job")
    result = vdk("deploy", "-p", str(job), "--skip-smoke")
    assert result.exit_code == 1
    assert "VDK_ML_TRAINING_REGISTRY" in result.stderr


def test_data_jobs_are_not_taken_over(tmp_path):
    data_job = tmp_path / "data-job"
    data_job.mkdir()
    (data_job / "config.ini").write_text("[owner]\nteam = t\n")
    (data_job / "10_step.py").write_text("def run(job_input):\n    pass\n")
    result = vdk("deploy", "-p", str(data_job))
    assert result.exit_code != 0
    assert "not an ml-training job" in result.output and "control-service" in result.output


@pytest.mark.needs_control_cli
def test_ml_only_options_are_refused_for_data_jobs_with_the_control_service_cli(tmp_path):
    control_cli = pytest.importorskip("vdk.plugin.control_cli_plugin.vdk_plugin_control_cli")
    data_job = tmp_path / "data-job"
    data_job.mkdir()
    (data_job / "config.ini").write_text("[owner]\nteam = t\n")
    result = CliEntryBasedTestRunner(control_cli, plugin).invoke(
        ["deploy", "-p", str(data_job), "-n", "d", "-r", "x", "--dry-run"]
    )
    assert result.exit_code == 2 and "--dry-run applies to ml-training jobs only" in result.output


@pytest.mark.needs_control_cli
def test_data_job_deploy_reaches_the_control_service_cli(tmp_path):
    control_cli = pytest.importorskip("vdk.plugin.control_cli_plugin.vdk_plugin_control_cli")
    data_job = tmp_path / "data-job"
    data_job.mkdir()
    (data_job / "config.ini").write_text("[owner]\nteam = t\n")
    runner = CliEntryBasedTestRunner(control_cli, plugin)
    for _ in range(2):  # the root group outlives invocations: wrapping twice must change nothing
        result = runner.invoke(["deploy", "-p", str(data_job), "-n", "data-job", "-r", "x"])
        assert "Cannot connect to the Control Service" in result.output  # the original command answered


@pytest.mark.needs_control_cli
def test_ml_job_dry_run_through_the_wrapped_deploy(tmp_path):
    control_cli = pytest.importorskip("vdk.plugin.control_cli_plugin.vdk_plugin_control_cli")
    result = CliEntryBasedTestRunner(control_cli, plugin).invoke(
        ["deploy", "-p", str(DDP_EXAMPLE), "--dry-run", "--backend", "pytorchjob"]
    )
    assert result.exit_code == 0, result.output
    assert [m["kind"] for m in yaml.safe_load_all(result.stdout)] == ["PyTorchJob", "ConfigMap"]


@pytest.mark.needs_control_cli
def test_wrapped_deploy_of_the_real_cli_prints_manifests_without_upstream_warnings():
    pytest.importorskip("vdk.plugin.control_cli_plugin.vdk_plugin_control_cli")
    done = subprocess.run(
        [str(VDK), "deploy", "-p", str(DDP_EXAMPLE), "--dry-run", "--backend", "job"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [m["kind"] for m in yaml.safe_load_all(done.stdout)] == ["Job", "Service", "ConfigMap"]
    assert "used more than once" not in done.stderr  # vdk-control-cli's duplicate -v, silenced
