"""The cluster verbs (`vdk show`, `list`, `execute`, `delete`, `diff`) read of a job directory who the job is: its
name, team, kube context and namespace (job.load_job_identity), from config.ini read once per command. A config.ini
with a sweep half written and a misspelt key does not stop them (through the real vdk CLI and the fake API server),
while `vdk run` and `vdk deploy`, which need the whole spec, refuse it naming what is wrong."""

from __future__ import annotations

import json

import pytest

from tests.support import cluster_state as cs
from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.job import config_file
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run

pytestmark = pytest.mark.usefixtures("isolated_environment")

# A sweep being written (a distribution that does not exist), and a key misspelt: neither says where runs are.
UNFINISHED = """[owner]
team = beta

[job]
type = ml-training

[ml-training]
namespace = ml-beta
nodez = 2
args = --lr ${lr}

[ml-training.sweep]
lr = logarithmic(1e-5, 1e-2)
metric = loss
"""


@pytest.fixture
def deployed(cluster, tmp_path):
    """A run of job `mnist` of team beta in namespace ml-beta, rank 0 running."""
    fake, _ = cluster(pytorchjob=True, namespaces=("default", "ml", "ml-beta"))
    spec = make_spec(tmp_path / "deployed", name="mnist", team="beta", nodes="1", gpus_per_node="0")
    main = KubeClient(namespace="ml-beta").apply(render_run(spec, IMAGE, make_run(spec), "ml-beta", "job"))[0]
    name = main["metadata"]["name"]
    fake.set_status("jobs", name, {"active": 1}, namespace="ml-beta")
    pod = fake.add("pods", cs.rank_pod(main, "job", 0, cs.running()), namespace="ml-beta")
    fake.set_log(pod["metadata"]["name"], "pytorch", "beta trains\n", namespace="ml-beta")
    return name


@pytest.fixture
def reads(monkeypatch) -> list:
    """Every reading of a config.ini (config_file.read_config), by job directory."""
    read: list = []
    original = config_file.read_config

    def counting(job_dir):
        read.append(job_dir)
        return original(job_dir)

    monkeypatch.setattr(config_file, "read_config", counting)
    return read


def ok(result):
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_show_list_and_logs_work_in_a_job_whose_sweep_and_another_key_are_bad(deployed, tmp_path, monkeypatch, reads):
    job = write_job(tmp_path, "mnist", config=UNFINISHED)
    shown = json.loads(ok(vdk("show", "-p", str(job), "-o", "json")).stdout)
    # its namespace and team are the job's, from the keys that say them
    assert shown["namespace"] == "ml-beta" and [run["name"] for run in shown["runs"]] == [deployed]
    assert len(reads) == 1  # one reading of config.ini for the whole command
    monkeypatch.chdir(job)
    reads.clear()
    listed = json.loads(ok(vdk("list", "-o", "json")).stdout)
    assert [(entry["job_name"], entry["job_team"]) for entry in listed] == [("mnist", "beta")]
    assert len(reads) == 1
    reads.clear()
    assert ok(vdk("execute", "--logs")).stdout == "[rank 0] beta trains\n"
    assert len(reads) == 1
    assert ok(vdk("show")).stdout.startswith("mnist of team beta ([owner] team of ")


def test_run_and_deploy_still_refuse_that_job_naming_each_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = write_job(tmp_path, "mnist", config=UNFINISHED)
    for command in (("run", str(job)), ("deploy", "-p", str(job), "--dry-run")):
        refused = vdk(*command)
        assert refused.exit_code != 0, refused.output
        assert "unknown key 'nodez'" in refused.output and "did you mean `nodes`?" in refused.output
    (job / "config.ini").write_text(UNFINISHED.replace("nodez", "nodes"))
    for command in (("run", str(job)), ("deploy", "-p", str(job), "--dry-run")):
        refused = vdk(*command)
        assert refused.exit_code != 0, refused.output
        assert "[ml-training.sweep]" in refused.output and "logarithmic" in refused.output, refused.output


def test_a_bad_key_that_says_where_runs_are_still_stops_show(tmp_path):
    job = write_job(tmp_path, "mnist", config=UNFINISHED.replace("namespace = ml-beta", "namespace = ML_Beta"))
    refused = vdk("show", "-p", str(job))
    assert refused.exit_code == 1 and "namespace" in refused.stderr and "ML_Beta" in refused.stderr, refused.stderr
