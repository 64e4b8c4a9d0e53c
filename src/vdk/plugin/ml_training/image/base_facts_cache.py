"""What was read from base images before (base_inspection.py), kept as JSON under `<cache>/bases/`: the
findings per manifest digest, and the digest each reference had when it was last read. Reading it
contacts nothing, so `vdk run` knows a base that a build or dry run has read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.image.base_facts import BaseFacts
from vdk.plugin.ml_training.image.base_facts import table_entry
from vdk.plugin.ml_training.image.build_cache import write_atomically
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

FORMAT = "base-v1"  # bump when what base_inspection.py finds (or how) changes, so old findings are not reused


def known_provides(spec: MLJobSpec) -> tuple[str, ...] | None:
    """The packages spec.base_image has, as far as they are known without contacting anything: from the
    table of well-known bases, or what an earlier build or dry run read from it; plus `base_provides`.
    None when the base was never read."""
    known = table_entry(spec.base_reference)
    if known is not None:
        found = list(known.provides)
    else:
        digest = spec.base_reference.digest
        facts = (cached(digest) if digest else None) or last_read(spec.base_image)
        if facts is None:
            return None
        found = [name for name, _ in facts.distributions]
    return tuple(dict.fromkeys(canonicalize_name(n) for n in [*found, *spec.base_provides]))


def _cache_dir() -> Path:
    return cache_root() / "bases"


def cached(digest: str | None) -> BaseFacts | None:
    if not digest or not digest.startswith("sha256:"):
        return None
    try:
        data = json.loads((_cache_dir() / f"{digest[7:]}.json").read_text(encoding="utf-8"))
        if data.pop("format") != FORMAT:
            return None
        data["distributions"] = tuple((name, version) for name, version in data["distributions"])
        data["site_dirs"] = tuple(data["site_dirs"])
        return BaseFacts(**data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(facts: BaseFacts) -> None:
    data = {"format": FORMAT, **dataclasses.asdict(facts)}
    write_atomically(_cache_dir() / f"{facts.digest[7:]}.json", json.dumps(data, indent=1, sort_keys=True))


def remember(reference: str, digest: str) -> None:
    """Which digest a reference (a tag) had when it was last read: a dry run without the registry
    uses it."""
    write_atomically(_cache_dir() / "references" / _reference_key(reference), digest)


def last_read(reference: str) -> BaseFacts | None:
    try:
        digest = (_cache_dir() / "references" / _reference_key(reference)).read_text().strip()
    except OSError:
        return None
    return cached(digest)


def _reference_key(reference: str) -> str:
    return hashlib.sha256(reference.encode()).hexdigest()[:32]
