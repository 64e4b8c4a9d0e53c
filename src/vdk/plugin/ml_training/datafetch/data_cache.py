"""The data cache: a directory (the claim `data_cache_pvc`, or a pod's own emptyDir without one, or a local
directory for `vdk run --full`) holding each fetched version once, keyed by the version (DataPin.cache_key):

    vdk-data/<key>/            the dataset's files, mounted read-only at its target in the training container
    vdk-data/<key>.complete    written last: the version is whole (JSON of the pin)
    vdk-data/<key>.lock        held (POSIX lock) by the one pod that fetches it; the others wait, then find it

A fetch that was cut short leaves no `.complete`: the next one resumes in the same directory (what is there
whole is kept). Standard library only."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.source_errors import NO_SPACE
from vdk.plugin.ml_training.datafetch.source_errors import SourceError

CACHE_DIR = "vdk-data"
WAIT_NOTE_SECONDS = 30.0


def sub_path(pin: DataPin) -> str:
    """The pin's directory relative to the cache's root: the training container's subPath."""
    return f"{CACHE_DIR}/{pin.cache_key}"


def entry(root: Path, pin: DataPin) -> Path:
    return root / sub_path(pin)


def is_complete(root: Path, pin: DataPin) -> bool:
    return entry(root, pin).with_name(pin.cache_key + ".complete").is_file()


def mark_complete(root: Path, pin: DataPin) -> None:
    marker = entry(root, pin).with_name(pin.cache_key + ".complete")
    part = marker.with_name(marker.name + ".part")
    part.write_text(json.dumps(pin.to_dict(), sort_keys=True))
    os.replace(part, marker)


@contextmanager
def locked(root: Path, pin: DataPin, waiting: Callable[[float], None] | None = None) -> Iterator[None]:
    """Held while this process fetches `pin`: other pods of the run (and of other runs of the same version) wait
    for it; `waiting(seconds)` every WAIT_NOTE_SECONDS while they do."""
    path = entry(root, pin).with_name(pin.cache_key + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        started = time.monotonic()
        noted = started
        while True:
            try:
                fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if waiting is not None and time.monotonic() - noted >= WAIT_NOTE_SECONDS:
                    noted = time.monotonic()
                    waiting(noted - started)
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN)


def check_space(root: Path, pin: DataPin, claim: str | None) -> None:
    """Enough free space for what of `pin` is not there yet; SourceError naming the claim otherwise."""
    if not pin.bytes:
        return
    have = sum(p.stat().st_size for p in entry(root, pin).rglob("*") if p.is_file()) if entry(root, pin).is_dir() else 0
    free = shutil.disk_usage(root).free
    needed = pin.bytes - have
    if needed > free:
        where = f"the data cache claim {claim}" if claim else "the pod's data cache (an emptyDir: the node's disk)"
        raise SourceError(
            f"{pin.source} needs {needed} more bytes, and {where} has {free} free",
            "make the cache claim bigger, or delete old versions from it (directories vdk-data/*), or set "
            "data_cache_pvc to a claim with room",
            NO_SPACE,
            pin.target,
        )
