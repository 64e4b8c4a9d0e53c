"""A run stopped at its time limit: a local run at `smoke_timeout` (`max_runtime` for a full run), a cluster
run at `max_runtime` (the Job's deadline)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.runtime import protocol


def out_of_time(evidence: Evidence) -> Finding | None:
    local, cluster = evidence.local, evidence.cluster
    if local is not None:
        if not local.timed_out or evidence.blame is not None:
            return None
        return local_failure(
            evidence,
            f"see where each rank was (above). If the job needs longer, raise `{local.timeout_setting}` in "
            f"[ml-training]" + (f" or {variable('smoke_timeout')}" if local.mode == protocol.SMOKE else ""),
        )
    if cluster is None or not cluster.failed:
        return None
    message = cluster.message or "the run failed"
    if "DeadlineExceeded" not in message and "deadline" not in message.lower():
        return None
    return Finding(
        FAILED,
        message,
        "it ran longer than `max_runtime` of [ml-training]: raise it, or make training resume from a checkpoint",
    )
