"""A node the idle policy stopped, on the cluster (its termination message) and locally (its reported error)."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import ClusterFacts
from vdk.plugin.ml_training.diagnosis.evidence import Ending
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.rules import idle as rule
from vdk.plugin.ml_training.runtime.idle_policy import ERROR_TYPE
from vdk.plugin.ml_training.runtime.idle_policy import Idle

WHERE = ('  File "/opt/vdk-ml/job/train.py", line 42, in train', "    batch = next(batches)")
IDLE = Idle("1", 7200, 5.0, 1234, "8", (("MainThread", WHERE),))


def test_a_cluster_node_stopped_by_the_idle_policy():
    message = "\n".join(IDLE.lines(8, training_thread_only=True)) + "\n[vdk-ml-training] gpu node=1 gpus=8 final=1"
    node1 = RankEvidence("1", "rank 1", 1, "llm-x-1", ended=Ending(exit_code=1, reason="Error", message=message))
    node0 = RankEvidence("0", "rank 0", 0, "llm-x-0", ended=Ending(exit_code=1, reason="Error", message="NCCL error"))
    evidence = Evidence((node0, node1), Blame(node0, node0.ended), cluster=ClusterFacts(finished=True, failed=True))
    finding = engine.why_failed(evidence)
    assert finding.what == (
        "stopped by idle_timeout: every GPU of node 1 below 5% SM activity for 2h (last step 1234) (pod llm-x-1)"
    )
    assert finding.fix.startswith("the GPUs waited for something: see where it was (below)")
    assert "raise `idle_timeout` in [ml-training] (0 turns the policy off)" in finding.fix
    assert finding.idle.as_stall().top_frames() == list(WHERE) and finding.ranks == ["1"]
    assert finding.to_dict()["idle"]["duration"] == "2h"


def test_a_local_rank_stopped_by_the_idle_policy(tmp_path):
    from tests.support.specs import make_spec

    error = {"type": ERROR_TYPE, "message": IDLE.describe(), "traceback": ""}
    rank = RankEvidence("0", "rank 0", 0, error=error, log=Path(tmp_path / "rank-0.log"))
    facts = LocalFacts(make_spec(tmp_path), "full", f"rank 0 failed: {IDLE.describe()}", "run `vdk run --full` again")
    finding = rule.stopped_idle(Evidence((rank,), Blame(rank, Ending(exit_code=123)), local=facts))
    assert finding.what == f"rank 0 failed: {IDLE.describe()}"
    assert finding.fix.endswith("Then run `vdk run --full` again") and "see where rank 0 was (above)" in finding.fix


def test_other_failures_are_not_idleness():
    plain = RankEvidence("0", "rank 0", 0, "p", ended=Ending(exit_code=1, message="Traceback ..."))
    assert rule.stopped_idle(Evidence((plain,), Blame(plain, plain.ended), cluster=ClusterFacts())) is None
