"""The last answer, when no rule explains the failure: where to look (torchrun's log; a cluster run's
message, or that its pods are gone and their logs with them)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure


def unexplained(evidence: Evidence) -> Finding | None:
    local, cluster = evidence.local, evidence.cluster
    if local is not None:
        return local_failure(evidence, f"see torchrun's log {local.agent_log}, then {local.again}")
    if cluster is None or not cluster.failed:
        return None
    fix = "its pods are gone (cleaned up after the failure), and their logs with them" if not evidence.ranks else None
    return Finding(FAILED, cluster.message or "the run failed", fix)
