"""A rank's pod placed on a node and starting: the image is being pulled or volumes mounted. Nothing to fix."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import Waiting


def starting(rank: RankEvidence) -> Waiting | None:
    if rank.phase == "Pending" and rank.node and rank.waiting_reason == "ContainerCreating":
        return Waiting(f"starting on {rank.node} (pulling the image or mounting volumes)", None)
    return None
