"""`vdk diff`'s outcomes: how each of two runs ended, as its operator, its pods and rank 0's log say it — the
phase, the last progress line's loss and other values, the duration from start to end, the GPU-hours it held —
through the real vdk CLI and the fake API server, in text and JSON; a run that never started has none."""

from __future__ import annotations

import json

import pytest

from tests.support import cluster_state as cs
from tests.support.deployed_runs import Cluster
from tests.support.vdk_cli import vdk

H = 3600


def ended(condition: str, started: float, end: float) -> dict:
    """A finished run's status as the PyTorchJob operator writes it; times are seconds after cs.T0."""
    at = cs.ts(end)
    return {
        "startTime": cs.ts(started),
        "completionTime": at,
        "conditions": [{"type": condition, "status": "True", "lastTransitionTime": at}],
    }


@pytest.fixture
def runs(cluster, tmp_path):
    fake, client = cluster(pytorchjob=True)
    kube = Cluster(fake, client, tmp_path / "jobs")
    # 2 nodes x 8 GPUs for 2 h, then 2 nodes x 8 GPUs for 30 min that failed; a third still queued
    good = kube.deploy(created=cs.ts(-60))
    kube.status(good, **ended("Succeeded", 0, 2 * H))
    log = (
        "[vdk-ml-training] progress step=100 loss=0.9 eval_loss=1.1\n"
        "[vdk-ml-training] progress step=900 loss=0.412 eval_loss=0.5 accuracy=0.91\nsaved\n"
    )
    kube.pod(good, 0, cs.terminated(0, "Completed"), log=log)
    bad = kube.deploy(created=cs.ts(3 * H - 60))
    kube.status(bad, **ended("Failed", 3 * H, 3.5 * H))
    kube.pod(bad, 0, cs.terminated(1), log="[vdk-ml-training] progress step=30 loss=2.31\nRuntimeError: NaN\n")
    queued = kube.deploy(created=cs.ago(60))
    return good["metadata"]["name"], bad["metadata"]["name"], queued["metadata"]["name"]


def test_each_run_s_outcome_loss_metrics_duration_and_gpu_hours(runs):
    good, bad, queued = runs
    result = vdk("diff", "-n", "mnist-ddp", good, bad, "-o", "json")
    assert result.exit_code == 0, result.stderr
    before, after = json.loads(result.stdout)["runs"]
    assert (before["run"], before["phase"], after["phase"]) == (good, "Succeeded", "Failed")
    assert (before["loss"], before["step"], after["loss"], after["step"]) == (0.412, 900, 2.31, 30)
    assert before["metrics"] == {"eval_loss": "0.5", "accuracy": "0.91"} and after["metrics"] == {}
    assert (before["seconds"], after["seconds"]) == (2 * H, H / 2)
    assert (before["gpu_hours"], after["gpu_hours"]) == (32, 8)  # 16 GPUs for 2 h, then for 30 min

    text = vdk("diff", "-n", "mnist-ddp", good.removeprefix("mnist-ddp-"), bad)  # a run by its suffix too
    assert text.exit_code == 0, text.stderr
    rows = {line.split()[0]: line.split()[1:] for line in text.stdout.splitlines() if line.startswith("  ")}
    assert rows["outcome"] == ["Succeeded", "Failed"]
    assert rows["final"] == ["loss", "0.412", "2.31"] and rows["accuracy"][0] == "0.91"
    assert rows["duration"] == ["2h00m", "30m00s"] and rows["GPU-hours"] == ["32", "8"]
    assert rows["eval_loss"] == ["0.5", "-"]  # a value one run has and the other not

    waiting = json.loads(vdk("diff", "-n", "mnist-ddp", bad, queued, "-o", "json").stdout)["runs"][1]
    assert (waiting["loss"], waiting["seconds"], waiting["gpu_hours"]) == (None, None, None)


def test_an_empty_run_name_is_refused_not_taken_for_the_latest_run(runs):
    good, bad, queued = runs
    for args in (("diff", "-n", "mnist-ddp", "", bad), ("diff", "-n", "mnist-ddp", good, "  ")):
        result = vdk(*args)
        assert result.exit_code != 0
        assert "is empty" in result.stderr and "it names no run, not the latest one" in result.stderr, result.stderr
        assert "vdk diff -n mnist-ddp RUN_A RUN_B" in result.stderr
    shown = vdk("show", "-n", "mnist-ddp", "-i", "")  # and wherever a run is named: -i "" of an unset variable
    assert shown.exit_code != 0 and "the run's name is empty ('')" in shown.stderr, shown.stderr
    assert "vdk execute --list -n mnist-ddp" in shown.stderr
