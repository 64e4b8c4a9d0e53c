"""`vdk execute --start --from RUN` end to end against the fake API server, a plain Job's pods run by the Job
controller's emulation (tests/support/job_controller.py): a run saves its state in its output directory and ends; the
run started `--from` it begins with that state (RUN's directory of the same claim copied in before the script), says
so, and `vdk show` and `vdk diff` name the run it continues. Once with the tests' real registry: the first run made
by a real `vdk deploy` (the job's image built and pushed there), the continued run pinned to the very digest that
deploy pushed; the other tests create their first run from manifests rendered as `vdk deploy` renders them. A run
still running is refused before anything is created."""

from __future__ import annotations

import json

import pytest
import requests

from tests.support.job_controller import LocalJobController
from tests.support.jobs import write_job
from tests.support.specs import make_run
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops.deploy import deploy_spec

pytestmark = pytest.mark.usefixtures("isolated_environment")

PLAIN_JOB = {"backend": "job", "gpus_per_node": "0", "cpu": "1", "memory": "2Gi", "output_pvc": "runs"}
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
    job = write_job(tmp_path / "jobs", "continued", ml=PLAIN_JOB, files={"train.py": TRAIN})
    claims = tmp_path / "claims"
    controller = LocalJobController(fake, job, {"runs": claims})
    monkeypatch.chdir(tmp_path)
    first = make_run(deploy_spec(job))
    create_run(client, first, job)
    controller.start()
    assert controller.wait(first.name, timeout=120).outcome == "Complete"
    yield fake, controller, first, claims
    controller.stop()


def test_a_deployed_run_is_continued_on_the_image_deploy_pushed_beginning_with_its_outputs(
    cluster, registry, base_image, tmp_path, monkeypatch
):
    fake, _ = cluster()
    fake.add_claim("runs")
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    # the test base (busybox and a fake python) stands in for a Python base: the Job controller's pods run this
    # interpreter, with the job directory and the claim as host directories
    ml = {**PLAIN_JOB, "base_image": base_image, "base_python_version": "3.11"}
    job = write_job(tmp_path / "jobs", "continued", ml=ml, files={"train.py": TRAIN})
    claims = tmp_path / "claims"
    monkeypatch.chdir(tmp_path)
    deployed = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")  # built and pushed to the registry
    assert deployed.exit_code == 0, deployed.output
    first, image = json.loads(deployed.stdout)["run"], json.loads(deployed.stdout)["image"]
    assert image.startswith(f"{registry.host}/team/continued@sha256:")
    repository, digest = image.split("/", 1)[1].split("@")
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    assert requests.head(f"{registry.url}/v2/{repository}/manifests/{digest}", headers=accept, timeout=5).ok
    controller = LocalJobController(fake, job, {"runs": claims}).start()
    try:
        assert controller.wait(first, timeout=120).outcome == "Complete"
        assert (claims / first / "outputs" / "state.txt").read_text() == first

        started = vdk("execute", "--start", "-n", "continued", "--from", first, "-o", "json")
        assert started.exit_code == 0, started.output
        second = json.loads(started.stdout)
        assert (second["continues"], second["rerun_of"], second["image"]) == (first, first, image)
        (created,) = [j for j in fake.stored("jobs") if j["metadata"]["name"] == second["run"]]
        (container,) = created["spec"]["template"]["spec"]["containers"]
        assert container["image"] == image  # the very digest deploy pushed: not rebuilt, not a tag
        ended = controller.wait(second["run"], timeout=120)
        assert ended.outcome == "Complete"
        assert f"began with {first}" in fake.logs[("ml", ended.pods[0].name, "pytorch", False)]
    finally:
        controller.stop()
    # the new run wrote its own state; the run it continued keeps its own
    assert (claims / second["run"] / "outputs" / "state.txt").read_text() == second["run"]
    assert (claims / first / "outputs" / "state.txt").read_text() == first

    shown = json.loads(vdk("show", "-n", "continued", "-o", "json").stdout)
    assert (shown["latest"]["run"]["continues"], shown["latest"]["run"]["image"]) == (first, image)
    assert f"continues  {first} (began with its outputs and checkpoints)" in vdk("show", "-n", "continued").stdout
    diff = vdk("diff", "-n", "continued", first, second["run"])
    assert diff.exit_code == 0, diff.output
    (row,) = [line for line in diff.stdout.splitlines() if line.strip().startswith("continues")]
    assert row.split() == ["continues", "-", first]


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
