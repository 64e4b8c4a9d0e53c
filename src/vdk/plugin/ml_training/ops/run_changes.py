"""What changed between two runs of a job: its code (file by file, from the code layer's manifests), its
requirements (the versions installed: the resolved lock), its configuration (the keys of what it trains; where
and how it runs is not compared, as the fingerprint does not), its base image (by digest) and each dataset's
version. `RunState` is what one run is made of, read from its record or gathered by a deploy about to start;
`changes_between` compares two. What a record does not say (written by an earlier version, a claim whose pods
reported no manifest) is unknown, never "unchanged". Data in, data out: the text is cli/diff_views.py's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import unversioned_source
from vdk.plugin.ml_training.job import WHERE_IT_RUNS

# Spec fields that are not configuration to compare: derived, or compared on their own (data).
_NOT_CONFIG = frozenset({"data", "smoke_data"}) | WHERE_IT_RUNS
CODE = "code"
REQUIREMENTS = "requirements"
CONFIG = "config"
BASE = "base"
DATA = "data"
PARTS = (CODE, REQUIREMENTS, CONFIG, BASE, DATA)


@dataclass(frozen=True)
class RunState:
    """What a run is made of. None: not known (a record of an earlier version, a dry run)."""

    run: str | None  # the run's name; None for the deploy about to start
    code: dict[str, str] | None
    dependencies: dict[str, str] | None
    config: dict[str, Any] | None
    base: str | None
    data: tuple[DataPin, ...] = ()

    @classmethod
    def from_record(cls, record: Any, manifests: dict[str, dict] | None = None) -> RunState:
        """A run's state from its record (k8s/runs/record.RunRecord); `manifests`: what its pods reported of its
        claims (target -> manifest)."""
        data = tuple(
            p.with_manifest(p.manifest or (manifests or {}).get(p.target)) if p.scheme == "pvc" else p
            for p in record.data
        )
        if not data:  # a record from before the data pins: its claims still count, unknown
            spec_data = [(d["target"], d["source"]) for d in record.spec.get("data") or []]
            spec_data += [(m["path"], _claim_source(m)) for m in record.spec.get("mounts") or []]
            data = tuple(DataPin(target=t, source=s) for t, s in spec_data)
        return cls(record.run_name, record.code, record.dependencies or None, record.spec, record.base, data)


def _claim_source(mount: dict) -> str:
    return f"pvc:{mount['claim']}" + (f"/{mount['sub_path']}" if mount.get("sub_path") else "")


@dataclass(frozen=True)
class DataChange:
    target: str
    before: DataPin | None
    after: DataPin | None
    same: bool | None  # None: cannot be known (a claim without manifests)
    added: list[str] = field(default_factory=list)  # files, when both lists are known
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "before": dict(self.before.to_dict(), objects=None) if self.before else None,  # the files: below
            "after": dict(self.after.to_dict(), objects=None) if self.after else None,
            "same": self.same,
            "files_added": self.added,
            "files_changed": self.changed,
            "files_removed": self.removed,
        }


@dataclass(frozen=True)
class RunChanges:
    """`after` against `before` (run names; None for the deploy about to start)."""

    before: str | None
    after: str | None
    code: dict[str, list[str]] | None  # {"added", "changed", "removed"}: paths; None: unknown
    requirements: dict[str, Any] | None  # {"added": {name: v}, "removed": {name: v}, "changed": {name: [a, b]}}
    config: dict[str, list[Any]]  # key -> [before, after]
    base: list[str | None] | None  # [before, after] when it changed; None: the same (or unknown: see `unknown`)
    data: list[DataChange]
    unknown: list[str]  # what could not be compared, and why

    @property
    def changed_parts(self) -> list[str]:
        parts = []
        if self.code and any(self.code.values()):
            parts.append(CODE)
        if self.requirements and any(self.requirements.values()):
            parts.append(REQUIREMENTS)
        if self.config:
            parts.append(CONFIG)
        if self.base:
            parts.append(BASE)
        if any(d.same is False for d in self.data):
            parts.append(DATA)
        return parts

    @property
    def changed(self) -> bool:
        """Something changed, or something could not be compared: a scheduled retraining must not be skipped for
        want of knowing."""
        return bool(self.changed_parts) or bool(self.unknown)

    def to_dict(self) -> dict:
        return {
            "before": self.before,
            "after": self.after,
            "changed": self.changed,
            "changed_parts": self.changed_parts,
            "code": self.code,
            "requirements": self.requirements,
            "config": self.config,
            "base": self.base,
            "data": [d.to_dict() for d in self.data],
            "unknown": list(self.unknown),
        }


def changes_between(before: RunState, after: RunState) -> RunChanges:
    """What changed from `before` to `after`."""
    unknown: list[str] = []
    code = _dict_diff(before.code, after.code)
    if code is None:
        unknown.append(f"code: {_who_lacks(before, after, 'code')} has no manifest of its files")
    requirements = None
    if before.dependencies is not None and after.dependencies is not None:
        changes = _dict_diff(before.dependencies, after.dependencies)
        assert changes is not None
        requirements = {
            "added": {name: after.dependencies[name] for name in changes["added"]},
            "removed": {name: before.dependencies[name] for name in changes["removed"]},
            "changed": {name: [before.dependencies[name], after.dependencies[name]] for name in changes["changed"]},
        }
    elif (before.dependencies is None) != (after.dependencies is None):
        requirements = {"added": dict(after.dependencies or {}), "removed": dict(before.dependencies or {})}
        requirements["changed"] = {}
    base: list[str | None] | None = None
    if before.base and after.base:
        base = [before.base, after.base] if before.base != after.base else None
    elif before.base or after.base:
        unknown.append(f"base image: {_who_lacks(before, after, 'base')} does not record its digest")
    data = _data_changes(before.data, after.data, unknown)
    return RunChanges(before.run, after.run, code, requirements, _config_diff(before, after), base, data, unknown)


def _who_lacks(before: RunState, after: RunState, what: str) -> str:
    missing = before if getattr(before, what) is None else after
    return f"run {missing.run}" if missing.run else "this deploy"


def _dict_diff(before: dict | None, after: dict | None) -> dict[str, list[str]] | None:
    if before is None or after is None:
        return None
    return {
        "added": sorted(set(after) - set(before)),
        "changed": sorted(k for k in set(after) & set(before) if after[k] != before[k]),
        "removed": sorted(set(before) - set(after)),
    }


def _config_diff(before: RunState, after: RunState) -> dict[str, list[Any]]:
    if before.config is None or after.config is None:
        return {}
    keys = sorted((set(before.config) | set(after.config)) - _NOT_CONFIG)
    return {
        key: [before.config.get(key), after.config.get(key)]
        for key in keys
        if json.dumps(before.config.get(key), sort_keys=True) != json.dumps(after.config.get(key), sort_keys=True)
    }


def _data_changes(before: tuple[DataPin, ...], after: tuple[DataPin, ...], unknown: list[str]) -> list[DataChange]:
    old = {p.target: p for p in before}
    new = {p.target: p for p in after}
    out = []
    for target in sorted(set(old) | set(new)):
        a, b = old.get(target), new.get(target)
        if a is None or b is None:
            out.append(DataChange(target, a, b, False))
            continue
        same_source = unversioned_source(a.source) == unversioned_source(b.source)
        if same_source and a.scheme != "pvc" and not (a.resolved and b.resolved):
            unknown.append(f"data {target}: {_who_unresolved(a, b)} was not pinned to a version")
            out.append(DataChange(target, a, b, None))
            continue
        same = a.same_version(b)
        if same is None:
            unknown.append(f"data {target}: {a.source} is not versioned, and no manifest of it is known for both runs")
        files = _dict_diff(a.objects, b.objects) if same is False else None
        if files is None:
            out.append(DataChange(target, a, b, same))
        else:
            out.append(DataChange(target, a, b, same, files["added"], files["changed"], files["removed"]))
    return out


def _who_unresolved(a: DataPin, b: DataPin) -> str:
    return "the earlier run" if not a.resolved else "this one"
