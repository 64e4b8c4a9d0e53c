"""Pods that cannot be placed (no node has the GPUs, memory or CPUs free; taints; node selectors; a
ResourceQuota; the autoscaler), and a run whose pods were not created at all."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import WAITING
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import Waiting
from vdk.plugin.ml_training.diagnosis.finding import fix_for

# Scheduler message fragments -> what to do.
SCHEDULING_FIXES = (
    Fix(
        r"Insufficient (nvidia\.com/(gpu|mig-\S+)|amd\.com/gpu)",
        "no node has that many free GPUs now: wait for running jobs to end, "
        "ask for fewer (`gpus_per_node`, `nodes` in [ml-training]) or ask your cluster admin for GPU capacity",
    ),
    Fix(
        r"Insufficient memory",
        "no node has that much free memory: lower `memory` in [ml-training] (or wait for capacity)",
    ),
    Fix(
        r"Insufficient cpu",
        "no node has that many free CPUs: lower `cpu` in [ml-training] (or wait for capacity)",
    ),
    Fix(
        r"Insufficient ephemeral-storage",
        "no node has enough free disk: the image or /dev/shm may be too large",
    ),
    Fix(
        r"untolerated taint",
        "the nodes with room are reserved (tainted) for other workloads: "
        "ask your cluster admin which node pool ML jobs may use",
    ),
    Fix(
        r"didn't match Pod's node affinity/selector",
        "no node matches the pod's node selector: ask your cluster admin for the node labels of the GPU pool",
    ),
    Fix(
        r"exceeded quota",
        "the namespace's ResourceQuota is used up: wait for other runs to end, or ask for a larger quota",
    ),
    Fix(
        r"didn't trigger scale-up|max node group size reached",
        "the cluster autoscaler cannot add a node that fits: the request is larger than any node type it has",
    ),
    Fix(
        r"persistentvolumeclaim",
        "a volume the pod needs is not available",
    ),
)


def unschedulable(rank: RankEvidence) -> Waiting | None:
    """A rank's pod the scheduler cannot place."""
    if rank.unschedulable is None:
        return None
    return Waiting(f"cannot be scheduled: {rank.unschedulable}", fix_for(rank.unschedulable, SCHEDULING_FIXES))


def no_pods_yet(evidence: Evidence) -> Finding | None:
    """A run without pods that should have them: the last warning about it (a quota refusing the pods, ...),
    else who has not created them yet."""
    cluster = evidence.cluster
    if cluster is None or evidence.ranks or not cluster.pods_read or not cluster.expects_pods:
        return None
    warnings = [e for e in cluster.events if e.type == "Warning"]
    if warnings:
        last = warnings[-1]
        return Finding(
            WAITING,
            f"no pods yet: {last.object}: {last.reason}: {last.message}",
            fix_for(last.message, SCHEDULING_FIXES),
        )
    who, fix = cluster.no_pods_yet
    return Finding(WAITING, f"no pods yet: {who}", fix)
