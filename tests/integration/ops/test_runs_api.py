"""The runs of a job through the Python API (ops/), as a notebook or a CI step calls it: no click, the real
`kubernetes` client and the HTTP-level fake API server. What a use case returns is what the command line
prints with -o json (`to_dict()`), and its notes and events go to the reporter it is given (none: nowhere)."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.kubelet import LocalKubelet
from tests.support.recorder import Recorder
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.ops.logs import run_logs
from vdk.plugin.ml_training.ops.outputs import run_outputs
from vdk.plugin.ml_training.ops.runs import cancel_run
from vdk.plugin.ml_training.ops.runs import delete_runs
from vdk.plugin.ml_training.ops.runs import list_jobs
from vdk.plugin.ml_training.ops.runs import list_runs
from vdk.plugin.ml_training.ops.runs import rerun
from vdk.plugin.ml_training.ops.runs import select_for_deletion
from vdk.plugin.ml_training.ops.runs import show_job
from vdk.plugin.ml_training.ops.runs import show_run
from vdk.plugin.ml_training.ops.scope import find_scope
from vdk.plugin.ml_training.ops.usage import gpu_usage

pytestmark = pytest.mark.usefixtures("isolated_environment")

TEAM = "Vision Research"


@pytest.fixture
def runs(cluster, tmp_path, monkeypatch):
    """Two PyTorchJob runs of mnist-ddp of team Vision Research (oldest first), and the fake API server."""
    monkeypatch.chdir(tmp_path)  # not in a job directory
    fake, client = cluster(pytorchjob=True)
    spec = make_spec(tmp_path / "jobs", nodes="2", gpus_per_node="8")
    applied = []
    for suffix in ("aaaa0001", "aaaa0002"):
        run = make_run(spec, name=f"mnist-ddp-{suffix}")
        applied.append(client.apply(render_run(spec, IMAGE, run, "ml", "pytorchjob"))[0])
    return fake, [main["metadata"]["name"] for main in applied]


def cli_json(*args: str):
    done = vdk(*args, "-o", "json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_a_notebook_lists_and_shows_what_the_command_line_shows(runs):
    _, names = runs
    scope = find_scope("mnist-ddp", TEAM)
    listing = list_jobs(scope)
    assert [job.to_dict()["runs"] for job in listing.jobs] == [2]
    assert listing.to_dict() == cli_json("list", "-t", TEAM)
    job = show_job(scope)
    assert sorted(r.name for r in job.runs) == sorted(names)
    assert job.to_dict() == cli_json("show", "-n", "mnist-ddp", "-t", TEAM)
    assert sorted(r.name for r in list_runs(scope)) == sorted(names)
    detail = show_run(scope, "aaaa0001")  # the part after the job name, as -i takes it
    assert detail.run.name == "mnist-ddp-aaaa0001"
    assert detail.to_dict() == cli_json("execute", "--show", "-n", "mnist-ddp", "-t", TEAM, "-i", "aaaa0001")


def test_a_run_without_pods_has_no_logs_and_says_why(runs):
    logs = run_logs(find_scope("mnist-ddp", TEAM))
    assert logs.ranks == [] and logs.to_dict()["ranks"] == []
    assert logs.why_no_pods()


def test_re_run_cancel_and_delete_through_the_python_api(runs):
    fake, names = runs
    scope = find_scope("mnist-ddp", TEAM)
    started = rerun(scope, "aaaa0001", reason="once more")
    assert started.to_dict()["rerun_of"] == "mnist-ddp-aaaa0001"
    assert f"PyTorchJob/{started.run_name}" in started.created
    assert f"PyTorchJob/{started.run_name}" in fake.run_objects()
    told = Recorder()
    cancelled = cancel_run(scope, started.run_name, reporter=told)
    assert f"PyTorchJob/{started.run_name}" in cancelled.deleted and told.notes == []
    assert f"PyTorchJob/{started.run_name}" not in fake.run_objects()
    selection = select_for_deletion(scope)
    assert delete_runs(selection, told) == selection.runs
    assert sorted(run.name for (run,) in told.named("run_deleted")) == sorted(names)
    assert fake.run_objects() == [] and told.notes == []
    usage = gpu_usage(scope).to_dict()  # the deleted runs stay counted
    assert usage["kind"] == "ml-training-usage" and usage["team"] == TEAM


def test_changing_another_team_s_runs_needs_that_team_named(runs):
    with pytest.raises(MLTrainingError, match="no team of yours is known"):
        select_for_deletion(find_scope("mnist-ddp"))


def test_outputs_come_back_through_the_python_api_with_progress_to_the_reporter(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake, client = cluster(pytorchjob=True)
    claim = tmp_path / "claim-ml-outputs"
    fake.kubelet = LocalKubelet({"ml-outputs": claim})
    spec = make_spec(tmp_path / "jobs", nodes="2", gpus_per_node="8", output_pvc="ml-outputs")
    run = make_run(spec)
    client.apply(render_run(spec, IMAGE, run, "ml", "pytorchjob"))
    (claim / run.name).mkdir(parents=True)
    (claim / run.name / "model.pt").write_bytes(os.urandom(10_000))
    told = Recorder()
    outputs = run_outputs(find_scope("mnist-ddp", TEAM), to=tmp_path / "back", reporter=told)
    assert (tmp_path / "back" / "model.pt").read_bytes() == (claim / run.name / "model.pt").read_bytes()
    assert outputs.to_dict()["files"][0]["path"] == "model.pt" and outputs.size == 10_000
    assert told.notes[0].startswith(f"Reading {run.name}'s outputs (PersistentVolumeClaim ml-outputs")
    assert "  model.pt  10.0 KB" in told.notes  # the copy's progress, a note
    assert fake.stored("pods") == []  # the copy pod is gone


def test_a_run_without_an_output_claim_says_how_to_get_one(runs):
    with pytest.raises(MLTrainingError, match="has no output claim") as raised:
        run_outputs(find_scope("mnist-ddp", TEAM))
    assert "output_pvc = NAME" in raised.value.fix
