"""`vdk execute --start --from RUN` end to end against the fake API server: a plain Job's run (rendered as `vdk
deploy` renders it, its pod run by the Job controller's emulation, tests/support/job_controller.py) saves its state in
its output directory and ends; the run started `--from` it begins with that state (RUN's directory of the same claim
copied in before the script), says so, and `vdk show` and `vdk diff` name the run it continues. A run still running
is refused before anything is created."""

from __future__ import annotations

import json

import pytest

from tests.support.job_controller import LocalJobController
from tests.support.jobs import write_job
from tests.support.specs import make_run
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops.deploy import deploy_spec

pytestmark = pytest.mark.usefixtures("isolated_environment")

IMAGE = JobImage("registry.example.com/ml/continued@sha256:" + "cd" * 32, "python")
# A plain script that keeps its own state: what it began with, then its run's name
TRAIN = """
import os

os.makedirs("outputs", exist_ok=True)
state = "outputs/state.txt"
began = open(state).read() if os.path.exists(state) else "nothing"
print(f"began with {began}", flush=True)
with open(state, "w") as f:
    f.write(os.environ["VDK_ML_TRAINING_RUN_NAME"])
"""


def create_run(client, run, job) -> None:
    """Create the run's objects as `vdk deploy` renders them."""
    spec = deploy_spec(job)
    client.apply(render_run(spec, IMAGE, run, client.namespace, spec.backend))


@pytest.fixture
def cluster_with_a_finished_run(cluster, tmp_path, monkeypatch):
    fake, client = cluster()
    fake.add_claim("runs")
    job = write_job(
        tmp_path / "jobs",
        "continued",
        ml={"backend": "job", "gpus_per_node": "0", "cpu": "1", "memory": "2Gi", "output_pvc": "runs"},
        files={"train.py": TRAIN},
    )
    claims = tmp_path / "claims"
    controller = LocalJobController(fake, job, {"runs": claims})
    monkeypatch.chdir(tmp_path)
    first = make_run(deploy_spec(job))
    create_run(client, first, job)
    controller.start()
    assert controller.wait(first.name, timeout=120).outcome == "Complete"
    yield fake, controller, first, claims
    controller.stop()


def test_a_run_started_from_an_ended_one_begins_with_its_outputs_and_says_which_it_continues(
    cluster_with_a_finished_run,
):
    fake, controller, first, claims = cluster_with_a_finished_run
    assert (claims / first.name / "outputs" / "state.txt").read_text() == first.name
    started = vdk("execute", "--start", "-n", "continued", "--from", first.name, "-o", "json")
    assert started.exit_code == 0, started.output
    second = json.loads(started.stdout)
    assert (second["continues"], second["rerun_of"]) == (first.name, first.name)
    ended = controller.wait(second["run"], timeout=120)
    assert ended.outcome == "Complete"
    log = fake.logs[("ml", ended.pods[0].name, "pytorch", False)]
    assert f"began with {first.name}" in log
    # the new run wrote its own state; the run it continued keeps its own
    assert (claims / second["run"] / "outputs" / "state.txt").read_text() == second["run"]
    assert (claims / first.name / "outputs" / "state.txt").read_text() == first.name

    shown = json.loads(vdk("show", "-n", "continued", "-o", "json").stdout)
    assert shown["latest"]["run"]["continues"] == first.name
    assert f"continues  {first.name} (began with its outputs and checkpoints)" in vdk("show", "-n", "continued").stdout
    diff = vdk("diff", "-n", "continued", first.name, second["run"])
    assert diff.exit_code == 0, diff.output
    (row,) = [line for line in diff.stdout.splitlines() if line.strip().startswith("continues")]
    assert row.split() == ["continues", "-", first.name]


def test_a_run_not_ended_cannot_be_continued_and_from_goes_with_start_only(cluster_with_a_finished_run):
    fake, controller, first, claims = cluster_with_a_finished_run
    fake.set_status("jobs", first.name, {"active": 1, "startTime": "2026-01-02T03:04:05Z"}, namespace="ml")
    refused = vdk("execute", "--start", "-n", "continued", "--from", first.name)
    assert refused.exit_code != 0
    assert "has not ended" in refused.output and f"vdk execute --cancel -n continued -i {first.name}" in refused.output
    assert len(fake.stored("jobs")) == 1  # nothing created
    wrong = vdk("execute", "--list", "-n", "continued", "--from", first.name)
    assert wrong.exit_code != 0 and "--from goes with --start" in wrong.output


def test_a_cancelled_run_is_gone_with_its_record_but_a_run_begins_with_what_it_left_on_the_claim(
    cluster_with_a_finished_run,
):
    fake, controller, first, claims = cluster_with_a_finished_run
    cancelled = vdk("execute", "--cancel", "-n", "continued", "-i", first.name)
    assert cancelled.exit_code == 0, cancelled.output
    later = make_run(deploy_spec(controller.job_dir))  # a later deploy of the job, on the same claim
    create_run(KubeClient(), later, controller.job_dir)
    assert controller.wait(later.name, timeout=120).outcome == "Complete"
    started = vdk("execute", "--start", "-n", "continued", "--from", first.name, "-o", "json")
    assert started.exit_code == 0, started.output
    assert f"{first.name} is not in the cluster any more (cancelled or deleted)" in started.stderr
    second = json.loads(started.stdout)
    assert (second["continues"], second["rerun_of"]) == (first.name, later.name)  # the latest deploy's manifests
    ended = controller.wait(second["run"], timeout=120)
    assert f"began with {first.name}" in fake.logs[("ml", ended.pods[0].name, "pytorch", False)]
    typo = vdk("execute", "--start", "-n", "continued", "--from", "not-a-run")
    assert typo.exit_code != 0 and "names no run of" in typo.output
