"""Where a run keeps its outputs and which interpreter its image starts, read from its manifests (its main
object, or the manifests of its run record): the claim and subPath mounted at the image's output directory
(k8s/pod_template.py mounts them). Pure reading of dicts: the run summaries and the copy of a run's outputs
(k8s/storage/outputs_copy.py) both use it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vdk.plugin.ml_training import layout


@dataclass(frozen=True)
class OutputLocation:
    claim: str
    directory: str  # the run's directory in the claim (its subPath)

    def describe(self) -> str:
        return f"PersistentVolumeClaim {self.claim}, directory {self.directory}/"

    def to_dict(self) -> dict:
        return {"claim": self.claim, "directory": self.directory}


def location_of(obj: dict) -> OutputLocation | None:
    """Where the run whose main object (or record manifest) is `obj` keeps its outputs: the claim and the
    subPath mounted at the image's output directory, in whichever pod template or pod change holds them."""
    mounts: list[dict] = []
    volumes: dict[str | None, dict] = {}  # by name (a manifest is not validated here: a name may be missing)
    for value in _dicts(obj):
        mounts += [
            m
            for m in value.get("volumeMounts") or []
            if isinstance(m, dict) and m.get("mountPath") == layout.OUTPUT_DIR
        ]
        volumes.update(
            (v.get("name"), v)
            for v in value.get("volumes") or []
            if isinstance(v, dict) and "persistentVolumeClaim" in v
        )
    for mount in mounts:
        volume = volumes.get(mount.get("name"))
        if volume is not None:
            return OutputLocation(volume["persistentVolumeClaim"].get("claimName", "?"), mount.get("subPath", ""))
    return None


def image_python(manifests: list[dict]) -> str:
    """The interpreter the run's containers start (the first word of their command)."""
    for value in _dicts(manifests):
        command = value.get("command")
        if isinstance(command, list) and layout.LAUNCHER_MODULE in command:
            return str(command[0])
    return "python3"


def _dicts(value: object) -> Iterator[dict]:
    """Every mapping in a manifest (or a list of them), outer ones first."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _dicts(item)
