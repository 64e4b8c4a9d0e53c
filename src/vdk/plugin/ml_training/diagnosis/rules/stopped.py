"""A rank stopped by SIGTERM: cancelled, preempted, past `max_runtime`, or stopped after another rank failed."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import rank_failure


def stopped(evidence: Evidence) -> Finding | None:
    ended = container_ending(evidence)
    if ended is None or ended[1].signal != "SIGTERM":
        return None
    blame, ending = ended
    return rank_failure(
        blame,
        f"was stopped (SIGTERM, exit code {ending.exit_code})",
        "it was cancelled, preempted, reached `max_runtime`, or stopped because another rank failed first",
    )
