"""Reading a run's state: ranks from each backend's pod labels, why it waits, why it failed,
progress lines. Pods are shaped as the operators and the kubelet write them (cluster_state)."""

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.k8s import diagnose
from vdk.plugin.ml_training.k8s import run_summary
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.run_summary import summarize

GPU_FULL = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


def run_object(tmp_path, backend, **keys):
    spec = make_spec(tmp_path, **{"nodes": "4", "gpus_per_node": "8", **keys})
    obj = render_run(spec, IMAGE, make_run(spec), "ml", backend)[0]
    obj["metadata"]["uid"] = "uid-1"
    return obj


def pods(obj, backend, *statuses):
    return [cs.rank_pod(obj, backend, rank, status) for rank, status in enumerate(statuses)]


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_every_backend_s_pods_map_to_node_ranks(tmp_path, backend):
    obj = run_object(tmp_path, backend)
    ranks = diagnose.rank_states(
        reversed(pods(obj, backend, cs.running(), cs.running(), cs.running(), cs.running())), backend
    )
    assert [(r.rank, r.index) for r in ranks] == [("0", 0), ("1", 1), ("2", 2), ("3", 3)]
    assert {r.container for r in ranks} == {cs.CONTAINER[backend]}
    assert all(r.state == "running" and r.memory_limit == "16Gi" for r in ranks)


def test_trainjob_helper_pods_are_not_ranks(tmp_path):
    obj = run_object(tmp_path, "trainjob")
    helper = cs.rank_pod(obj, "trainjob", 0, cs.terminated(0, "Completed"))
    helper["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = "dataset-initializer"
    ranks = diagnose.rank_states([helper, *pods(obj, "trainjob", cs.running())], "trainjob")
    assert [(r.rank, r.index) for r in ranks] == [("0", 0), ("dataset-initializer", None)]


def test_the_newest_pod_of_a_rank_counts(tmp_path):
    obj = run_object(tmp_path, "job")
    old = cs.rank_pod(obj, "job", 1, cs.terminated(1), created=cs.ts(0), suffix="aaaaa")
    new = cs.rank_pod(obj, "job", 1, cs.running(), created=cs.ts(100), suffix="bbbbb")
    (rank,) = diagnose.rank_states([new, old], "job")
    assert rank.pod.endswith("bbbbb") and rank.attempts == 2 and rank.state == "running"


def test_unschedulable_ranks_are_grouped_with_the_scheduler_message_and_a_fix(tmp_path):
    obj = run_object(tmp_path, "pytorchjob")
    run = summarize({**obj, "status": {"conditions": [{"type": "Running", "status": "True"}]}})
    ranks = diagnose.rank_states(
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
    (finding,) = diagnose.why_waiting(run, ranks, [], [])
    assert finding.what == f"ranks 1-3: cannot be scheduled: {GPU_FULL}"
    assert finding.ranks == ["1", "2", "3"]
    assert "GPU" in finding.fix and "gpus_per_node" in finding.fix
    # the operator says Running; the run is not, while ranks cannot start
    assert run.phase == run_summary.RUNNING
    assert diagnose.effective_phase(run.phase, ranks) == run_summary.PENDING


@pytest.mark.parametrize(
    "message, expected",
    [
        (
            'failed to pull and unpack image "r.example.com/ml/x@sha256:ab": failed to authorize: 401 Unauthorized',
            "imagePullSecrets",
        ),
        (
            'rpc error: code = NotFound desc = failed to pull image "r.example.com/ml/x@sha256:ab": not found',
            "deploy again",
        ),
        ("dial tcp: lookup registry.internal on 10.0.0.10:53: no such host", "reachable from inside the cluster"),
    ],
)
def test_image_pull_failures_say_what_to_fix(tmp_path, message, expected):
    obj = run_object(tmp_path, "job", nodes="1")
    run = summarize(obj)
    ranks = diagnose.rank_states(
        pods(obj, "job", cs.waiting("ImagePullBackOff", f"Back-off pulling image: {message}")), "job"
    )
    (finding,) = diagnose.why_waiting(run, ranks, [], [])
    assert finding.what.startswith("rank 0 (pod ") and "cannot pull the image (ImagePullBackOff)" in finding.what
    assert message in finding.what and expected in finding.fix


def test_kueue_admission_is_explained_from_the_workload(tmp_path):
    obj = run_object(tmp_path, "pytorchjob", queue="team-a-queue")
    obj["status"] = {"conditions": [{"type": "Suspended", "status": "True", "message": "PyTorchJob is suspended"}]}
    run = summarize(obj)
    assert run.phase == run_summary.QUEUED and run.queue == "team-a-queue"
    quota = (
        "couldn't assign flavors to pod set master: "
        "insufficient quota for nvidia.com/gpu in flavor default-flavor, 24 more needed"
    )
    workload = cs.workload(obj, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota}])
    (finding,) = diagnose.why_waiting(run, [], [], [workload])
    assert finding.what == f"queued in team-a-queue (Kueue Workload {workload['metadata']['name']}): {quota}"
    assert "quota" in finding.fix

    missing = cs.workload(
        obj,
        [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Inadmissible",
                "message": "LocalQueue team-a-queue doesn't exist",
            }
        ],
    )
    (finding,) = diagnose.why_waiting(run, [], [], [missing])
    assert "LocalQueue team-a-queue doesn't exist" in finding.what and "kubectl get localqueues" in finding.fix

    # without read access to Workloads: Kueue's events say the same
    events = diagnose.run_events([cs.event("Workload", workload["metadata"]["name"], "Pending", quota)], run.name)
    (finding,) = diagnose.why_waiting(run, [], events, [])
    assert finding.what == f"queued in team-a-queue: {quota}"


def test_no_pods_yet_shows_the_controller_s_warning(tmp_path):
    obj = run_object(tmp_path, "job")
    run = summarize(obj)
    quota = (
        'pods "x-0-abcde" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, '
        "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8"
    )
    events = diagnose.run_events(
        [cs.event("Job", run.name, "FailedCreate", quota, component="job-controller")], run.name
    )
    (finding,) = diagnose.why_waiting(run, [], events, [])
    assert finding.what == f"no pods yet: Job/{run.name}: FailedCreate: {quota}"
    assert "ResourceQuota" in finding.fix


def test_the_first_rank_to_fail_is_the_culprit_not_the_ones_stopped_after_it(tmp_path):
    obj = run_object(tmp_path, "job")
    obj["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "message": "Pod ml/x-1 has condition DisruptionTarget"}]
    }
    run = summarize(obj)
    ranks = diagnose.rank_states(
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
    finding = diagnose.why_failed(run, ranks)
    assert finding.ranks == ["1"]
    assert (
        finding.what == f"rank 1 (pod {ranks[1].pod}) was OOMKilled: it used more memory than its limit (memory = 16Gi)"
    )
    assert "raise `memory`" in finding.fix


def test_within_the_same_second_a_killed_rank_is_the_culprit_not_the_peer_that_lost_it(tmp_path):
    """Node 1 is SIGKILLed; node 0's ranks fail on the broken connection in the same second."""
    obj = run_object(tmp_path, "job", nodes="2")
    ranks = diagnose.rank_states(
        pods(obj, "job", cs.terminated(1, "Error", finished=300), cs.terminated(137, "Error", finished=300)), "job"
    )
    rank, termination, _ = diagnose.failing_rank(ranks)
    assert (rank.rank, termination.signal) == ("1", "SIGKILL")
    # a second apart, time decides
    ranks = diagnose.rank_states(
        pods(obj, "job", cs.terminated(1, "Error", finished=299), cs.terminated(137, "Error", finished=300)), "job"
    )
    assert diagnose.failing_rank(ranks)[0].rank == "0"


def test_a_restarted_rank_s_previous_container_is_the_culprit(tmp_path):
    obj = run_object(tmp_path, "pytorchjob", nodes="2")
    run = summarize({**obj, "status": {"conditions": [{"type": "Restarting", "status": "True"}]}})
    ranks = diagnose.rank_states(
        pods(
            obj,
            "pytorchjob",
            cs.running(),
            cs.waiting("CrashLoopBackOff", "back-off 40s", restarts=3, last=cs.termination(139, "Error")),
        ),
        "pytorchjob",
    )
    rank, termination, previous = diagnose.failing_rank(ranks)
    assert (rank.rank, termination.exit_code, previous) == ("1", 139, True)
    finding = diagnose.why_failed(run, ranks)
    assert finding.what.endswith("crashed (SIGSEGV, exit code 139) (restarted 3 times)")
    assert finding.log_source.endswith("previous container")
    assert (
        diagnose.rank_explanation(ranks[1])
        == "restarting after a crash: it exited with code 139 (SIGSEGV) (restarted 3 times)"
    )


@pytest.mark.parametrize(
    "code, reason, words",
    [
        (137, "Error", "killed (SIGKILL, exit code 137)"),
        (143, "Error", "stopped (SIGTERM, exit code 143)"),
        (1, "Error", "exited with code 1"),
        (134, "Error", "ended by SIGABRT (exit code 134)"),
        (128, "ContainerCannotRun", "could not start"),
    ],
)
def test_exit_codes_and_signals_read_as_words(code, reason, words):
    what, _ = diagnose.termination_meaning(diagnose.Termination(code, reason, "exec: python: not found", None))
    assert words in what


def test_failed_run_without_pods_says_they_are_gone(tmp_path):
    obj = run_object(tmp_path, "job")
    obj["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
            }
        ]
    }
    finding = diagnose.why_failed(summarize(obj), [])
    assert finding.what == "Job was active longer than specified deadline"
    assert "max_runtime" in finding.fix


def test_log_hints_name_well_known_failures():
    tail = [
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  exitcode  : 1 (pid: 41)",
    ]
    assert diagnose.log_hints(tail) == [diagnose.LOG_HINTS[0][1]]
    assert "requirements.txt" in diagnose.log_hints(["ModuleNotFoundError: No module named 'peft'"])[0]
    assert "host memory" in diagnose.log_hints(["  exitcode  : -9 (pid: 77)"])[0]
    assert diagnose.log_hints(["all good"]) == []


def test_events_of_the_run_are_merged_and_ordered(tmp_path):
    run = "mnist-ddp-abcdefgh"
    raw = [
        cs.event("Pod", f"{run}-worker-0", "FailedScheduling", GPU_FULL, count=3, last="2026-01-02T03:05:00Z"),
        cs.event("Pod", f"{run}-worker-0", "FailedScheduling", GPU_FULL, count=2, last="2026-01-02T03:06:00Z"),
        cs.event("Pod", "other-run-worker-0", "FailedScheduling", "not ours", last="2026-01-02T03:05:30Z"),
        cs.event("PyTorchJob", run, "SuccessfulCreatePod", "Created pod", type_="Normal", last="2026-01-02T03:04:00Z"),
    ]
    events = diagnose.run_events(raw, run)
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
