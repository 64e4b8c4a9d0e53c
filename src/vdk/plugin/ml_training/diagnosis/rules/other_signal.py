"""A cluster rank ended by a signal no other rule explains (SIGABRT, SIGBUS, ...): named, without a fix."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import rank_failure


def ended_by_signal(evidence: Evidence) -> Finding | None:
    ended = container_ending(evidence)
    if ended is None or not ended[1].signal:
        return None
    blame, ending = ended
    return rank_failure(blame, f"was ended by {ending.signal} (exit code {ending.exit_code})", None)
