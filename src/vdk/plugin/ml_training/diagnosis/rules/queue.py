"""A run Kueue holds: queued until its ClusterQueue has quota for it (or its LocalQueue does not exist),
evicted and queued again, or waiting for admission checks."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import WAITING
from vdk.plugin.ml_training.diagnosis.finding import Finding


def queued(evidence: Evidence) -> Finding | None:
    """Kueue holds a queued run's object suspended until its ClusterQueue has quota for it."""
    cluster = evidence.cluster
    if cluster is None:
        return None
    for workload in cluster.workloads:
        if workload.quota_refused:
            lead = f"queued in {cluster.queue or 'its queue'} (Kueue Workload {workload.name})"
            if workload.evicted:
                lead += f", after being evicted: {workload.evicted_message}"
            return Finding(
                WAITING,
                f"{lead}: {workload.quota_message or workload.quota_reason}",
                queue_fix(workload.quota_message or ""),
            )
        if workload.pending_checks:
            checks = "check" if len(workload.pending_checks) == 1 else "checks"
            names = ", ".join(workload.pending_checks)
            return Finding(WAITING, f"quota reserved in Kueue; waiting for the admission {checks} {names}", None)
    if not cluster.queued:
        return None
    pending = [
        e for e in cluster.events if e.object.startswith("Workload/") and e.reason in ("Pending", "Inadmissible")
    ]
    if pending:
        return Finding(WAITING, f"queued in {cluster.queue}: {pending[-1].message}", queue_fix(pending[-1].message))
    return Finding(
        WAITING,
        f"queued in {cluster.queue}: Kueue has not admitted it yet",
        "its queue is busy or not yet attempted; `kubectl get workloads` shows the queue",
    )


def queue_fix(message: str) -> str:
    if "doesn't exist" in message or "is inactive" in message or "not found" in message:
        return "set `queue` in [ml-training] to a LocalQueue of this namespace (`kubectl get localqueues`)"
    return (
        "the queue's quota is in use by other workloads: "
        "it starts when quota frees up (or lower `nodes` / `gpus_per_node`)"
    )
