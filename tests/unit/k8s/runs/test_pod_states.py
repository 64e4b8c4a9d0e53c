"""Reading a run's state: ranks from each backend's pod labels, which rank failed first, the run's events.
Pods are shaped as the operators and the kubelet write them (cluster_state)."""

import pytest

from tests.support import cluster_state as cs
from tests.support.rendered_runs import pods
from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs.summary import summarize

GPU_FULL = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_every_backend_s_pods_map_to_node_ranks(tmp_path, backend):
    obj = run_object(tmp_path, backend)
    ranks = pod_states.rank_states(
        reversed(pods(obj, backend, cs.running(), cs.running(), cs.running(), cs.running())), backend
    )
    assert [(r.rank, r.index) for r in ranks] == [("0", 0), ("1", 1), ("2", 2), ("3", 3)]
    assert {r.container for r in ranks} == {cs.CONTAINER[backend]}
    assert all(r.state == "running" and r.memory_limit == "16Gi" for r in ranks)


def test_trainjob_helper_pods_are_not_ranks(tmp_path):
    obj = run_object(tmp_path, "trainjob")
    helper = cs.rank_pod(obj, "trainjob", 0, cs.terminated(0, "Completed"))
    helper["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = "dataset-initializer"
    ranks = pod_states.rank_states([helper, *pods(obj, "trainjob", cs.running())], "trainjob")
    assert [(r.rank, r.index) for r in ranks] == [("0", 0), ("dataset-initializer", None)]


def test_the_newest_pod_of_a_rank_counts(tmp_path):
    obj = run_object(tmp_path, "job")
    old = cs.rank_pod(obj, "job", 1, cs.terminated(1), created=cs.ts(0), suffix="aaaaa")
    new = cs.rank_pod(obj, "job", 1, cs.running(), created=cs.ts(100), suffix="bbbbb")
    (rank,) = pod_states.rank_states([new, old], "job")
    assert rank.pod.endswith("bbbbb") and rank.attempts == 2 and rank.state == "running"


def test_the_first_rank_to_fail_is_the_culprit_not_the_ones_stopped_after_it(tmp_path):
    obj = run_object(tmp_path, "job")
    obj["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "message": "Pod ml/x-1 has condition DisruptionTarget"}]
    }
    run = summarize(obj)
    ranks = pod_states.rank_states(
        pods(
            obj,
            "job",
            cs.terminated(143, "Error", finished=200),  # stopped by the Job controller
            cs.terminated(137, "OOMKilled", finished=250),
            cs.terminated(1, "Error", finished=260),  # died of the broken collective afterwards
            cs.terminated(143, "Error", finished=150),
        ),
        "job",
    )
    finding = run_evidence.why_failed(run, ranks)
    assert finding.ranks == ["1"]
    assert (
        finding.what == f"rank 1 (pod {ranks[1].pod}) was OOMKilled: it used more memory than its limit (memory = 16Gi)"
    )
    assert "raise `memory`" in finding.fix


def test_within_the_same_second_a_killed_rank_is_the_culprit_not_the_peer_that_lost_it(tmp_path):
    """Node 1 is SIGKILLed; node 0's ranks fail on the broken connection in the same second."""
    obj = run_object(tmp_path, "job", nodes="2")
    ranks = pod_states.rank_states(
        pods(obj, "job", cs.terminated(1, "Error", finished=300), cs.terminated(137, "Error", finished=300)), "job"
    )
    rank, termination, _ = pod_states.failing_rank(ranks)
    assert (rank.rank, termination.signal) == ("1", "SIGKILL")
    # a second apart, time decides
    ranks = pod_states.rank_states(
        pods(obj, "job", cs.terminated(1, "Error", finished=299), cs.terminated(137, "Error", finished=300)), "job"
    )
    assert pod_states.failing_rank(ranks)[0].rank == "0"


def test_a_restarted_rank_s_previous_container_is_the_culprit(tmp_path):
    obj = run_object(tmp_path, "pytorchjob", nodes="2")
    run = summarize({**obj, "status": {"conditions": [{"type": "Restarting", "status": "True"}]}})
    ranks = pod_states.rank_states(
        pods(
            obj,
            "pytorchjob",
            cs.running(),
            cs.waiting("CrashLoopBackOff", "back-off 40s", restarts=3, last=cs.termination(139, "Error")),
        ),
        "pytorchjob",
    )
    rank, termination, previous = pod_states.failing_rank(ranks)
    assert (rank.rank, termination.exit_code, previous) == ("1", 139, True)
    finding = run_evidence.why_failed(run, ranks)
    assert finding.what.endswith("crashed (SIGSEGV, exit code 139) (restarted 3 times)")
    assert finding.log_source.endswith("previous container")
    assert (
        run_evidence.rank_explanation(ranks[1])
        == "restarting after a crash: it exited with code 139 (SIGSEGV) (restarted 3 times)"
    )


def test_events_of_the_run_are_merged_and_ordered(tmp_path):
    run = "mnist-ddp-abcdefgh"
    raw = [
        cs.event("Pod", f"{run}-worker-0", "FailedScheduling", GPU_FULL, count=3, last="2026-01-02T03:05:00Z"),
        cs.event("Pod", f"{run}-worker-0", "FailedScheduling", GPU_FULL, count=2, last="2026-01-02T03:06:00Z"),
        cs.event("Pod", "other-run-worker-0", "FailedScheduling", "not ours", last="2026-01-02T03:05:30Z"),
        cs.event("PyTorchJob", run, "SuccessfulCreatePod", "Created pod", type_="Normal", last="2026-01-02T03:04:00Z"),
    ]
    events = pod_states.run_events(raw, run)
    assert [(e.reason, e.count, e.last_seen) for e in events] == [
        ("SuccessfulCreatePod", 1, "2026-01-02T03:04:00Z"),
        ("FailedScheduling", 5, "2026-01-02T03:06:00Z"),
    ]


def test_run_shape_per_backend(tmp_path):
    shapes = {}
    for backend in ("pytorchjob", "trainjob", "job"):
        shapes[backend] = summarize(run_object(tmp_path, backend)).shape
    assert shapes == {"pytorchjob": "4 x 8 GPU", "trainjob": "4 x 8 GPU", "job": "4 x 8 GPU"}
    assert summarize(run_object(tmp_path, "pytorchjob", nodes="2:8")).shape == "2:8 x 8 GPU"
    assert summarize(run_object(tmp_path, "job", gpus_per_node="1g.10gb", nodes="2")).shape == "2 x 1 mig-1g.10gb"
    assert summarize(run_object(tmp_path, "job", gpus_per_node="0", nodes="1")).shape == "1 x CPU"
