"""What a deploy pinned of each dataset: its source as config.ini names it, the immutable version it resolved
to, and a fingerprint of its content; written by the deploy (the fetch step's argument, the run record) and
read by the fetch step, the record's reader and `vdk diff`: writer and reader here.

- S3: the object list (key, size, ETag, and VersionId where the bucket is versioned) hashed into the
  fingerprint. A versioned prefix is pinned `as_of` the newest change the listing saw (the server's clock), and
  fetched at the versions that were current then; an unversioned one can only be fetched while it still has
  that list (the fetch step checks, and says so).
- Hugging Face: the commit sha the revision named (it is the fingerprint too).
- PersistentVolumeClaims: not versioned; each pod reports a manifest (paths, sizes, mtimes hashed) at start as
  a line that `vdk` reads back (MANIFEST_MARK, `manifest_line` / `parse_manifests`).

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any
from urllib.parse import quote
from urllib.parse import unquote

from vdk.plugin.ml_training.vocabulary import wire
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

S3 = "s3"
HF = "hf"
PVC = "pvc"
SCHEMES = (S3, HF, PVC)
NOT_VERSIONED = "not versioned"
MAX_LISTED = 1000
MANIFEST_MARK = wire.mark(wire.DATA_MANIFEST)
_MANIFEST_LINE = re.compile(
    re.escape(MANIFEST_MARK) + r" target=(\S+) files=(\d+) bytes=(\d+) sha256=([0-9a-f]{64})( partial)?"
)


def scheme_of(source: str) -> str:
    """s3, hf or pvc (the scheme of a validated source)."""
    return PVC if source.startswith("pvc:") else source.split("://", 1)[0]


def fingerprint(lines: Iterable[str]) -> str:
    """sha256 of the sorted lines: equal for equal sets, whatever order a listing returned them in."""
    digest = hashlib.sha256()
    for line in sorted(lines):
        digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


def unversioned_source(source: str) -> str:
    """The source without its revision (`hf://datasets/org/name@main` -> `hf://datasets/org/name`)."""
    if scheme_of(source) != HF:
        return source
    return source.rsplit("@", 1)[0] if "@" in source else source


@dataclass(frozen=True)
class DataPin:
    """One dataset of a run, pinned. `version`: the commit sha (hf), `as of <time>` (versioned S3), None (an
    unversioned S3 prefix, whose fingerprint is all there is, and claims); `manifest`: what a pod reported of
    a claim ({"files", "bytes", "sha256", "partial"}), None until then."""

    target: str  # as config.ini writes it: data/train, /data
    source: str  # s3://bucket/prefix, hf://datasets/org/name@main, pvc:imagenet/sub
    version: str | None = None
    fingerprint: str | None = None
    versioned: bool = False
    as_of: str | None = None  # versioned S3: the listing's newest change (ISO 8601, the server's time)
    files: int | None = None
    bytes: int | None = None
    manifest: dict | None = None
    # path -> what identifies its content (ETag and VersionId, a blob id) for up to MAX_LISTED files: the record
    # keeps it so that `vdk diff` names the files that changed; the fetch step does not need it
    objects: dict | None = None

    @property
    def scheme(self) -> str:
        return scheme_of(self.source)

    @property
    def fetched(self) -> bool:
        """Fetched into the cache by the fetch step (claims are mounted as they are)."""
        return self.scheme != PVC

    @property
    def resolved(self) -> bool:
        return self.scheme == PVC or self.fingerprint is not None

    @property
    def cache_key(self) -> str:
        """The directory of the cache claim this version is fetched into: equal for equal content of one source
        (two branches naming one commit share it), and never reused for another version."""
        if not self.resolved:
            return "unresolved-" + hashlib.sha256(self.source.encode()).hexdigest()[:16]
        basis = f"{unversioned_source(self.source)}\n{self.fingerprint}\n{self.as_of or ''}"
        return f"{self.scheme}-{hashlib.sha256(basis.encode()).hexdigest()[:32]}"

    def describe_version(self) -> str:
        """The version as people read it: a commit, `versions as of ...`, an object list, not versioned."""
        if self.scheme == HF:
            return f"commit {self.version}" if self.version else "unresolved"
        if self.scheme == S3:
            if self.fingerprint is None:
                return "unresolved"
            what = f"{counted(self.files or 0, 'object')}, {size_text(self.bytes or 0)}"
            if self.versioned:
                return f"object versions as of {self.as_of} ({what}, list {self.fingerprint[:12]})"
            return f"object list {self.fingerprint[:12]} ({what}; the bucket is not versioned)"
        if self.manifest:
            partial = ", first files only" if self.manifest.get("partial") else ""
            return (
                f"{NOT_VERSIONED}; manifest {self.manifest['sha256'][:12]} ({counted(self.manifest['files'], 'file')}, "
                f"{size_text(self.manifest['bytes'])}{partial})"
            )
        return f"{NOT_VERSIONED} (its manifest is reported by the run's pods)"

    def same_version(self, other: DataPin) -> bool | None:
        """Whether `other` is the same content of the same source; None when that cannot be known (a claim
        without a manifest on either side)."""
        if unversioned_source(self.source) != unversioned_source(other.source):
            return False
        if self.scheme == PVC:
            if not self.manifest or not other.manifest:
                return None
            return self.manifest.get("sha256") == other.manifest.get("sha256")
        return self.fingerprint == other.fingerprint and self.fingerprint is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataPin:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def with_manifest(self, manifest: dict | None) -> DataPin:
        return replace(self, manifest=manifest)


def encode_pins(pins: Iterable[DataPin]) -> str:
    """The pins as one line of JSON (the fetch step's argument), without their lists of files."""
    return json.dumps([replace(p, objects=None).to_dict() for p in pins], sort_keys=True, separators=(",", ":"))


def decode_pins(text: str) -> list[DataPin]:
    """The pins `encode_pins` wrote (ValueError: not such a list)."""
    data = json.loads(text)
    if not isinstance(data, list) or not all(isinstance(d, dict) and "source" in d for d in data):
        raise ValueError("not a list of data pins")
    return [DataPin.from_dict(d) for d in data]


# --- what pods report of a claim ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimManifest:
    """Paths, sizes and mtimes of a mounted claim, hashed: what a pod reports at start."""

    target: str
    files: int
    bytes: int
    sha256: str
    partial: bool = False  # more files than a manifest takes: the first ones (in walk order) only
    lines: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def line(self) -> str:
        partial = " partial" if self.partial else ""
        return f"{MANIFEST_MARK} target={quote(self.target, safe='/')} files={self.files} bytes={self.bytes} " + (
            f"sha256={self.sha256}{partial}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "sha256": self.sha256, "partial": self.partial}


def parse_manifests(lines: Iterable[str]) -> dict[str, dict]:
    """target -> manifest dict of every manifest line among `lines` (the last one of a target wins)."""
    found: dict[str, dict] = {}
    for line in lines:
        if MANIFEST_MARK not in line:
            continue
        match = _MANIFEST_LINE.search(line)
        if match:
            found[unquote(match.group(1))] = {
                "files": int(match.group(2)),
                "bytes": int(match.group(3)),
                "sha256": match.group(4),
                "partial": bool(match.group(5)),
            }
    return found
