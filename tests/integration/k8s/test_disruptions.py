"""A disruption is not a failure: the Indexed Job `vdk deploy` renders (its podFailurePolicy as the fake API server
admits it), run by the Job controller's emulation (tests/support/job_controller.py) with `max_restarts = 0`, its pod
evicted by the kubelet and then its next pod preempted by the scheduler, each as the cluster does it (the condition
DisruptionTarget, the event, SIGTERM): each is replaced without counting, the run trains to its end, and `vdk show`
lists both restarts with their causes, not counted, and the steps the first one redid (the script keeps no
checkpoint: its next pod started over). Past `max_disruptions` the next pod stops before the script (rank 0 counts
the run's starts in its output directory), and its exit code fails the run at once, as a code failure does."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.job_controller import LocalJobController
from tests.support.jobs import write_job
from tests.support.specs import make_run
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops.deploy import deploy_spec

pytestmark = pytest.mark.usefixtures("isolated_environment")

IMAGE = JobImage("registry.example.com/ml/disrupted@sha256:" + "ab" * 32, "python")
STEPS = 40
TRAIN = f"""
import sys, time
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range({STEPS}):
    loss = model(torch.randn(4, 2)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if "--fail" in sys.argv and step == 3:
        raise RuntimeError("a bug at step 3")
    time.sleep(0.1)
"""


ML = {"backend": "job", "gpus_per_node": "0", "cpu": "1", "memory": "2Gi", "max_restarts": "0", "output_pvc": "runs"}


@pytest.fixture
def disrupted(cluster, tmp_path, monkeypatch):
    """(fake, client, a job writer, the Job controller started by the test once its run is created)."""
    fake, client = cluster()
    fake.add_claim("runs")
    jobs = tmp_path / "jobs"
    controller = LocalJobController(fake, jobs / "disrupted", {"runs": tmp_path / "claims"})
    monkeypatch.chdir(tmp_path)

    def job(**ml: str):
        env = {"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.3"}
        return write_job(jobs, "disrupted", ml={**ML, **ml}, env=env, files={"train.py": TRAIN})

    yield fake, client, job, controller
    controller.stop()


def deploy(client, job):
    spec = deploy_spec(job)
    run = make_run(spec)
    client.apply(render_run(spec, IMAGE, run, client.namespace, spec.backend))
    return run


def live_pod(controller, run_name: str, after: int = 0, min_step: int = 1):
    """The running pod of the run, the `after`-th one or later, once its log shows step `min_step`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = getattr(controller.jobs.get(run_name), "pods", [])
        if len(pods) > after and pods[-1].process.poll() is None:
            log = controller.fake.logs.get(("ml", pods[-1].name, "pytorch", False), "")
            if f"step={min_step}" in log or any(f"step={n}" in log for n in range(min_step, STEPS + 1)):
                return pods[-1]
        time.sleep(0.1)
    raise AssertionError(f"no running pod {after} of {run_name}: {controller.fake.logs}")


def test_evicted_and_preempted_pods_are_replaced_without_spending_max_restarts_and_vdk_show_names_each(disrupted):
    fake, client, job, controller = disrupted
    run = deploy(client, job())
    controller.start()
    first = live_pod(controller, run.name, after=0, min_step=5)
    controller.disrupt(first, "TerminationByKubelet")  # the kubelet under node pressure: the pod stays, Failed
    second = live_pod(controller, run.name, after=1, min_step=2)
    controller.disrupt(second, "PreemptionByScheduler")  # deleted once counted; its event stays
    ended = controller.wait(run.name, timeout=180)
    assert (ended.outcome, ended.failed, len(ended.pods)) == ("Complete", 0, 3)

    shown = json.loads(vdk("show", "-n", "disrupted", "-o", "json").output)
    restarts = shown["latest"]["restarts"]
    assert [(r["cause"], r["counted"], r["disruption"]) for r in restarts] == [
        ("evicted", False, True),
        ("preempted", False, True),
    ], restarts
    evicted, preempted = restarts
    assert evicted["pod"] == first.name and evicted["rank"] == "0"
    assert evicted["detail"].startswith("TerminationByKubelet: The node was low on resource: memory")
    # it reached step 5 or more, and its next pod started over (a plain script keeps no checkpoint)
    assert evicted["resumed"] == 0 and evicted["reached"] >= 5 and evicted["steps_redone"] == evicted["reached"]
    # the preempted pod is gone from the API: its event says what stopped it, its steps are not known any more
    assert preempted["pod"] == second.name and preempted["detail"].startswith("Preempted: Preempted by pod")
    assert preempted["steps_redone"] is None
    text = vdk("show", "-n", "disrupted").output
    assert "Restarts:" in text and "evicted" in text and "preempted" in text


def test_past_max_disruptions_the_next_pod_stops_at_once_and_the_run_fails_saying_why(disrupted):
    fake, client, job, controller = disrupted
    run = deploy(client, job(max_disruptions="0"))
    controller.start()
    controller.disrupt(live_pod(controller, run.name, after=0, min_step=2), "EvictionByEvictionAPI")
    ended = controller.wait(run.name, timeout=120)
    assert (ended.outcome, ended.failed, len(ended.pods)) == ("Failed", 1, 2)
    log = fake.logs[("ml", ended.pods[1].name, "pytorch", False)]
    assert "this run started 2 times" in log and "(at most 1: 1 + max_restarts + max_disruptions)" in log
