"""A run's restarts from the pods and events the cluster writes (tests/support/cluster_state.py): each cause, whether
max_restarts counts it on each backend, and the steps redone read from rank 0's logs."""

from __future__ import annotations

import pytest

from tests.support.cluster_state import event
from tests.support.cluster_state import rank_pod
from tests.support.cluster_state import running
from tests.support.cluster_state import terminated
from tests.support.cluster_state import termination
from tests.support.cluster_state import ts
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.runs import restarts
from vdk.plugin.ml_training.k8s.runs.pod_states import run_events

RUN = {"metadata": {"name": "mnist-k3x9p2qa", "labels": {"vdk.io/run": "mnist-k3x9p2qa"}}}


def disrupted(status: dict, reason: str, message: str = "") -> dict:
    status["conditions"] = [
        *status.get("conditions", []),
        {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message},
    ]
    return status


def attempts(backend: str, *statuses: dict, rank: int = 0) -> list[dict]:
    """One rank's pods in the order they were created, a minute apart."""
    return [
        rank_pod(RUN, backend, rank, status, created=ts(60 * i), suffix=f"a{i}") for i, status in enumerate(statuses)
    ]


@pytest.mark.parametrize(
    "reason, cause",
    [
        ("PreemptionByScheduler", "preempted"),
        ("EvictionByEvictionAPI", "evicted"),
        ("TerminationByKubelet", "evicted"),
        ("DeletionByTaintManager", "node lost"),
        ("DeletionByPodGC", "node lost"),
    ],
)
def test_each_disruption_reason_is_named_and_not_counted_where_the_backend_replaces_it_free(reason, cause):
    pods = attempts("job", disrupted(terminated(143), reason, "said so"), running())
    (restart,) = restarts.run_restarts(pods, "job")
    assert (restart.cause, restart.disruption, restart.counted, restart.rank) == (cause, True, False, "0")
    assert restart.detail == f"{reason}: said so" and restart.pod == pods[0]["metadata"]["name"]
    # a TrainJob's runtime decides: vdk cannot say
    (on_trainjob,) = restarts.run_restarts(
        attempts("trainjob", disrupted(terminated(143), reason), running()), "trainjob"
    )
    assert on_trainjob.counted is None


def test_the_run_s_own_failures_count_an_oom_kill_a_bug_and_a_kubelet_eviction_without_the_condition():
    oom = attempts("job", terminated(137, reason="OOMKilled"), running())
    bug = attempts("job", terminated(1), running(), rank=1)
    old_kubelet = attempts(
        "job", {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}, running(), rank=2
    )
    found = {r.rank: r for r in restarts.run_restarts(oom + bug + old_kubelet, "job")}
    assert (found["0"].cause, found["0"].counted, found["0"].detail) == ("OOMKilled", True, "OOMKilled (exit code 137)")
    assert (found["1"].cause, found["1"].counted, found["1"].detail) == ("the code failed", True, "exited with code 1")
    assert (found["2"].cause, found["2"].counted, found["2"].detail) == ("evicted", False, "Evicted: low on memory")


def test_a_container_restarted_in_place_is_one_entry_with_how_often_and_its_last_cause():
    pods = attempts("pytorchjob", running(restarts=3, last=termination(137, reason="OOMKilled", finished=200)))
    (restart,) = restarts.run_restarts(pods, "pytorchjob")
    assert (restart.cause, restart.times, restart.in_place, restart.counted) == ("OOMKilled", 3, True, True)
    assert restart.at == ts(200)
    assert restarts.run_restarts(attempts("pytorchjob", running()), "pytorchjob") == []  # no restart: nothing


def test_a_pod_that_is_gone_is_known_by_the_event_that_stopped_it_and_listed_pods_are_not_counted_twice():
    pods = attempts("job", disrupted(terminated(143), "TerminationByKubelet"), running())
    listed = pods[0]["metadata"]["name"]
    events = run_events(
        [
            event("Pod", "mnist-k3x9p2qa-0-gone1", "Preempted", "Preempted by pod 1234 on node gpu-7", last=ts(30)),
            event("Pod", listed, "Evicted", "The node was low on resource: memory.", last=ts(20)),
            event("Pod", "mnist-k3x9p2qa-0-gone2", "Killing", "Stopping container pytorch", last=ts(40)),
        ],
        "mnist-k3x9p2qa",
    )
    found = restarts.run_restarts(pods, "job", events)
    assert [(r.pod, r.cause, r.counted) for r in found] == [
        ("mnist-k3x9p2qa-0-gone1", "preempted", False),
        (listed, "evicted", False),
    ]
    assert found[0].detail == "Preempted: Preempted by pod 1234 on node gpu-7" and found[0].rank == "?"


def progress(step: int, resumed: str | None = None) -> str:
    return f"[vdk-ml-training] progress step={step}/100" + (f" resumed={resumed}" if resumed else "") + "\n"


def test_the_steps_redone_are_where_the_ended_attempt_got_less_where_the_next_went_on_from():
    pods = attempts("job", disrupted(terminated(143), "PreemptionByScheduler"), terminated(1), running())
    first, second, third = (p["metadata"]["name"] for p in pods)
    logs = {
        (first, False): "hello\n" + progress(10) + progress(42),
        (second, False): progress(40, "checkpoint-40@40") + progress(55),  # resumed from its on-stop checkpoint
        (third, False): progress(3) + progress(9),  # the bug's next attempt started over
    }
    asked = []

    def tail(pod, container, previous):
        asked.append((pod, container, previous))
        return logs[(pod, previous)], None

    found = restarts.with_steps(restarts.run_restarts(pods, "job"), pods, "job", tail)
    assert [(r.cause, r.reached, r.resumed, r.steps_redone) for r in found] == [
        ("preempted", 42, 40, 2),
        ("the code failed", 55, 0, 55),
    ]
    assert {container for _, container, _ in asked} == {"pytorch"}


def test_steps_of_a_restart_in_place_come_from_its_previous_and_current_container_and_unread_logs_leave_them_unknown():
    pods = attempts("pytorchjob", running(restarts=1, last=termination(1)))
    name = pods[0]["metadata"]["name"]
    logs = {(name, True): progress(80), (name, False): progress(50, "checkpoint-50@50")}
    (restart,) = restarts.with_steps(
        restarts.run_restarts(pods, "pytorchjob"), pods, "pytorchjob", lambda p, c, prev: (logs[(p, prev)], None)
    )
    assert (restart.reached, restart.resumed, restart.steps_redone) == (80, 50, 30)

    def refused(pod, container, previous):
        raise KubeApiError("pods/log is forbidden", "ask for get on pods/log", 403, "Forbidden")

    (unknown,) = restarts.with_steps(restarts.run_restarts(pods, "pytorchjob"), pods, "pytorchjob", refused)
    assert unknown.steps_redone is None and unknown.to_dict()["steps_redone"] is None
