"""A rank's pod taken away: evicted (the node ran out of a resource), preempted, past its deadline, its node
lost."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding

_TAKEN = ("Evicted", "DeadlineExceeded", "Preempted", "NodeLost")


def evicted(evidence: Evidence) -> Finding | None:
    if evidence.cluster is None or evidence.blame is not None:
        return None
    rank = next((r for r in evidence.ranks if r.pod_reason in _TAKEN), None)
    if rank is None:
        return None
    return Finding(
        FAILED,
        f"rank {rank.rank} (pod {rank.pod}) was {rank.pod_reason}: {rank.pod_message or ''}".rstrip(": "),
        "the node ran out of a resource or the pod was preempted: "
        "deploy again, and raise `memory` if the node was low on memory",
        [rank.rank],
    )
