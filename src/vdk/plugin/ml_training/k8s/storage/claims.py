"""The PersistentVolumeClaims a job names (its output claim, its datasets' claims, its data cache), checked
before anything is built: a claim that does not exist would leave the run's pods Pending, after a smoke run and
a build."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import DATA_SECTION
from vdk.plugin.ml_training.job import MOUNTS_SECTION
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.resources import PERSISTENT_VOLUME_CLAIM as PVC

# Access modes that let pods on several nodes mount a claim at once.
SHARED_MODES = {"ReadWriteMany": "ReadWriteMany", "ReadOnlyMany": "ReadOnlyMany"}


@dataclass(frozen=True)
class ClaimUse:
    """One claim a job names, and where config.ini (or VDK configuration) names it."""

    claim: str
    where: str  # "output_pvc", "[ml-training.mounts] /data"
    writes: bool  # the run writes to it (the output claim)


def claims_of(spec: MLJobSpec) -> list[ClaimUse]:
    uses = [ClaimUse(spec.output_pvc, "output_pvc", True)] if spec.output_pvc else []
    uses += [ClaimUse(m.claim, f"[{MOUNTS_SECTION}] {m.path}", False) for m in spec.mounts]
    uses += [ClaimUse(d.claim()[0], f"[{DATA_SECTION}] {d.target}", False) for d in spec.data if not d.fetched]
    if spec.data_cache_pvc and any(d.fetched for d in spec.data):
        uses.append(ClaimUse(spec.data_cache_pvc, "data_cache_pvc", True))
    return uses


def check_claims(client: KubeClient, spec: MLJobSpec, note: Callable[[str], None]) -> None:
    """Raise an MLTrainingError naming every claim of the job that is not in the namespace; `note` what may
    go wrong with the others (a claim several nodes cannot mount). A user who may not read claims gets a
    note: the pods will say it if one is missing."""
    missing: list[ClaimUse] = []
    for use in claims_of(spec):
        found, refused = client.transport.get_tolerant(
            PVC.path(client.namespace, use.claim), PVC.action("get", client.namespace, use.claim)
        )
        if refused is not None and refused.status == 403:
            note(
                f"PersistentVolumeClaims cannot be read here (`get persistentvolumeclaims`), so {use.claim} "
                f"({use.where}) was not checked; if it is missing the pods stay Pending"
            )
            return
        if refused is not None:
            missing.append(use)
            continue
        _note_access(found or {}, use, spec, note)
    if missing:
        names = ", ".join(f"{u.claim} ({u.where})" for u in missing)
        raise MLTrainingError(
            f"no PersistentVolumeClaim {names} in namespace {client.namespace}\nNothing was built or deployed.",
            f"create it, or correct the name in {spec.config_path} (`kubectl get pvc -n {client.namespace}` "
            "lists the claims there)",
        )


def _note_access(claim: dict, use: ClaimUse, spec: MLJobSpec, note: Callable[[str], None]) -> None:
    spec_modes = (claim.get("spec") or {}).get("accessModes") or []
    phase = (claim.get("status") or {}).get("phase")
    if phase == "Lost":
        note(f"PersistentVolumeClaim {use.claim} ({use.where}) has lost its volume: the pods cannot mount it")
    if spec.nodes.max > 1 and spec_modes and not any(m in SHARED_MODES for m in spec_modes):
        note(
            f"PersistentVolumeClaim {use.claim} ({use.where}) is {', '.join(spec_modes)}: the pods of "
            f"{spec.nodes.max} nodes can mount it together only on one machine; use a ReadWriteMany claim "
            "(NFS, CephFS, EFS, Filestore, ...) for multi-node runs"
        )
    if use.writes and spec_modes and all(m == "ReadOnlyMany" for m in spec_modes):
        note(f"PersistentVolumeClaim {use.claim} ({use.where}) is ReadOnlyMany: the run cannot write its outputs")
