"""Pods the scheduler cannot place, and runs without pods: the scheduler's message with a fix."""

from tests.support import cluster_state as cs
from tests.support.rendered_runs import pods
from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.k8s.runs.summary import summarize

GPU_FULL = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


def test_unschedulable_ranks_are_grouped_with_the_scheduler_message_and_a_fix(tmp_path):
    obj = run_object(tmp_path, "pytorchjob")
    run = summarize({**obj, "status": {"conditions": [{"type": "Running", "status": "True"}]}})
    ranks = pod_states.rank_states(
        pods(
            obj,
            "pytorchjob",
            cs.running(),
            cs.unschedulable(GPU_FULL),
            cs.unschedulable(GPU_FULL),
            cs.unschedulable(GPU_FULL),
        ),
        "pytorchjob",
    )
    (finding,) = run_evidence.why_waiting(run, ranks, [], [])
    assert finding.what == f"ranks 1-3: cannot be scheduled: {GPU_FULL}"
    assert finding.ranks == ["1", "2", "3"]
    assert "GPU" in finding.fix and "gpus_per_node" in finding.fix
    # the operator says Running; the run is not, while ranks cannot start
    assert run.phase == run_summary.RUNNING
    assert pod_states.effective_phase(run.phase, ranks) == run_summary.PENDING


def test_no_pods_yet_shows_the_controller_s_warning(tmp_path):
    obj = run_object(tmp_path, "job")
    run = summarize(obj)
    quota = (
        'pods "x-0-abcde" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, '
        "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8"
    )
    events = pod_states.run_events(
        [cs.event("Job", run.name, "FailedCreate", quota, component="job-controller")], run.name
    )
    (finding,) = run_evidence.why_waiting(run, [], events, [])
    assert finding.what == f"no pods yet: Job/{run.name}: FailedCreate: {quota}"
    assert "ResourceQuota" in finding.fix
