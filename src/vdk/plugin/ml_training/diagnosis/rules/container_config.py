"""A container that cannot be created or started: a Secret, ConfigMap or volume it needs is missing, or the
image has no such command (no Python, a wrong entrypoint)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Waiting
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import rank_failure

CONFIG_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
_CANNOT_RUN = ("ContainerCannotRun", "StartError")


def cannot_create(rank: RankEvidence) -> Waiting | None:
    """A rank whose container waits because the kubelet cannot create it."""
    if rank.waiting_reason not in CONFIG_FAILURES:
        return None
    return Waiting(
        f"cannot start its container ({rank.waiting_reason}): {rank.waiting_message or ''}".rstrip(": "),
        "a Secret, ConfigMap or volume it needs is missing, or the image has no such command",
    )


def could_not_start(evidence: Evidence) -> Finding | None:
    """A rank whose container ended without running: the runtime could not start its command."""
    ended = container_ending(evidence)
    if ended is None or ended[1].reason not in _CANNOT_RUN:
        return None
    blame, ending = ended
    return rank_failure(
        blame,
        f"could not start: {ending.message or ending.reason}",
        "check `entrypoint` in [ml-training] and that the base image has Python and torch",
    )
