"""Which containers of a followed run's ranks failed (ops/follow.py): each failed instance once, the one before a
restart included, a success or a stop by SIGTERM after another rank's failure not."""

from vdk.plugin.ml_training.k8s.runs.pod_states import RankState
from vdk.plugin.ml_training.k8s.runs.pod_states import Termination
from vdk.plugin.ml_training.ops.follow import _failed_instances


def rank(restarts=0, terminated=None, previous=None) -> RankState:
    return RankState("1", 1, "pod-1", "pytorch", "Running", "node", True, restarts, terminated=terminated,
                     previous=previous)  # fmt: skip


def ended(code: int, reason: str = "Error") -> Termination:
    return Termination(code, reason, None, None)


def test_a_running_or_succeeded_rank_has_no_failure():
    assert _failed_instances(rank()) == []
    assert _failed_instances(rank(terminated=ended(0, "Completed"))) == []


def test_the_failed_container_and_the_one_before_a_restart_are_each_one_failure():
    crashed = ended(1)
    assert _failed_instances(rank(terminated=crashed)) == [(0, crashed, False)]
    assert _failed_instances(rank(restarts=2, previous=crashed)) == [(1, crashed, True)]
    killed = ended(137, "OOMKilled")
    assert _failed_instances(rank(restarts=1, previous=crashed, terminated=killed)) == [
        (0, crashed, True),
        (1, killed, False),
    ]
