"""The training code raised: locally, the traceback the rank reported; on a cluster, a container that exited
with an error code (its log holds the traceback)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import rank_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error


def error_reported(evidence: Evidence) -> Finding | None:
    """A local rank's Python error that no rule before this one explains: its traceback says what to fix."""
    reported = reported_error(evidence)
    if reported is None:
        return None
    local, blame, _ = reported
    return local_failure(evidence, f"fix the error in the traceback above ({blame.rank.label}), then {local.again}")


def exited_with_error(evidence: Evidence) -> Finding | None:
    """A cluster rank's container that exited with a code (no signal, no reason that says more)."""
    ended = container_ending(evidence)
    if ended is None:
        return None
    blame, ending = ended
    return rank_failure(
        blame, f"exited with code {ending.exit_code}", "the training code failed: see the end of its log"
    )
