"""A run that continues another (`vdk execute --start --from RUN`): the manifests of a run started again, changed so
that its pods begin with RUN's outputs. Every training container that mounts the run's directory of the output claim
also mounts RUN's directory of that claim, read-only (RUN_MOUNT, through a volume of its own for the claim), and is
told where it is and whose it is
(VDK_ML_TRAINING_CONTINUES_DIR, VDK_ML_TRAINING_RESUME_FROM): runtime/earlier_outputs.py copies it in before the code
runs, and automatic resume takes RUN's checkpoints as this run's lineage. The run's objects and its record say
`vdk.io/continues: RUN`. Backend-independent: the renderers put the output mount and the run's environment wherever
their backend keeps a container (a pod template, an operator's trainer and its pod changes)."""

from __future__ import annotations

import copy
from typing import Any

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.k8s.pod_template import OUTPUT_VOLUME
from vdk.plugin.ml_training.k8s.runs import identity as run_meta
from vdk.plugin.ml_training.runtime import protocol

RUN_MOUNT = f"{layout.ROOT}/continues"  # RUN's directory of the output claim, read-only
# A volume of its own for the same claim: Trainer v2.0's pod changes key a container's mounts by volume name.
RUN_VOLUME = "vdk-continues"


def continuing(manifests: list[dict], run_name: str, continues: str) -> list[dict]:
    """`manifests` of the new run `run_name` (its main object first, its record last), continuing `continues`."""
    out = copy.deepcopy(manifests)
    for manifest in out:
        annotations = (manifest.get("metadata") or {}).get("annotations")
        if annotations is not None:
            annotations[run_meta.ANNOTATION_CONTINUES] = continues
        _walk(manifest, run_name, continues)
    return out


def _walk(node: Any, run_name: str, continues: str) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, run_name, continues)
        return
    if not isinstance(node, dict):
        return
    env = node.get("env")
    if isinstance(env, list) and any(isinstance(e, dict) and e.get("name") == protocol.RUN_NAME for e in env):
        env += [
            {"name": protocol.RESUME_FROM, "value": continues},
            {"name": protocol.CONTINUES_DIR, "value": RUN_MOUNT},
        ]
    mounts = node.get("volumeMounts")
    if isinstance(mounts, list) and any(_own_outputs(m, run_name) for m in mounts):
        mounts.append({"name": RUN_VOLUME, "mountPath": RUN_MOUNT, "subPath": continues, "readOnly": True})
    volumes = node.get("volumes")
    if isinstance(volumes, list):
        claim = next((v for v in volumes if _output_claim(v)), None)
        if claim is not None:
            source = {**claim["persistentVolumeClaim"], "readOnly": True}
            volumes.append({"name": RUN_VOLUME, "persistentVolumeClaim": source})
    for key, value in node.items():
        if key not in ("env", "volumeMounts", "volumes"):
            _walk(value, run_name, continues)


def _output_claim(volume: Any) -> bool:
    return isinstance(volume, dict) and volume.get("name") == OUTPUT_VOLUME and "persistentVolumeClaim" in volume


def _own_outputs(mount: Any, run_name: str) -> bool:
    return isinstance(mount, dict) and mount.get("name") == OUTPUT_VOLUME and mount.get("subPath") == run_name
