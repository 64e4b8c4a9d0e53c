"""The entries of a local cache that several commands use at once (two terminals, two test workers, a sweep's
trials): a directory below the cache root with a meta file that is touched when used (a dependency layer, a local
run's overlay). An entry appears in one step (os.replace of a complete scratch directory) and is never removed
under a command that uses it:

- a command takes an entry with `use`: a shared lock on its meta file, held until the command (this process) ends,
  then the meta file touched (recently used). An entry that is not there any more, or was replaced by another
  while the lock was awaited, is a cache miss (None), never a crash;
- `prune_unused` removes an entry only under an exclusive lock that no command's shared lock allows, after looking at
  its age again under that lock, and moves it out of its name in one step before it deletes its files: a command
  that opened its meta file meanwhile finds no entry there once it has the lock, and builds its own.

POSIX advisory locks (flock), as the data cache's (datafetch/data_cache.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

_PRUNED = ".pruned-"  # an entry being deleted, out of its name

# The entries this process uses: (device, inode) of the meta file -> the descriptor that holds its shared lock, open
# until the process ends (a deploy pushes the layer's blob long after it took it; a run's ranks import from the
# overlay for hours). One descriptor per entry, however often it is taken.
_held: dict[tuple[int, int], int] = {}


def use(entry: Path, meta_name: str) -> bool:
    """Take `entry` for this command: its meta file's shared lock (prune leaves it alone while this process lives),
    and the meta file touched (recently used: kept by prune). False when there is no entry (any more): a miss."""
    meta = entry / meta_name
    try:
        fd = os.open(meta, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a prune moves the entry away (one rename)
        opened = os.fstat(fd)
        there = os.stat(meta)  # a prune moved it away, or a refresh put another in its place, while we waited
        if (there.st_dev, there.st_ino) != (opened.st_dev, opened.st_ino):
            os.close(fd)
            return False
        os.utime(meta)
    except OSError:
        os.close(fd)
        return False
    key = (opened.st_dev, opened.st_ino)
    if key in _held:
        os.close(fd)  # the lock this process took before still holds it (flock: per open file, not per descriptor)
    else:
        _held[key] = fd
    return True


def prune_unused(folder: Path, meta_name: str, max_age_days: float) -> list[Path]:
    """Remove the entries below `folder` (each a directory with its `meta_name` file, touched when used) that nothing
    used for `max_age_days` and that no command uses now; the ones removed."""
    removed = []
    cutoff = time.time() - max_age_days * 86400
    for meta in folder.glob(f"*/{meta_name}"):
        try:
            if meta.stat().st_mtime < cutoff and _remove_unused(meta.parent, meta_name, cutoff):
                removed.append(meta.parent)
        except OSError:
            pass  # gone meanwhile (another prune), or not ours to remove
    for leftover in folder.glob(f"{_PRUNED}*"):  # what a prune that was stopped half-way left
        shutil.rmtree(leftover, ignore_errors=True)
    return removed


def _remove_unused(entry: Path, meta_name: str, cutoff: float) -> bool:
    meta = entry / meta_name
    fd = os.open(meta, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a command uses it
        opened = os.fstat(fd)
        there = os.stat(meta)
        if (there.st_dev, there.st_ino) != (opened.st_dev, opened.st_ino) or opened.st_mtime >= cutoff:
            return False  # replaced, or used (touched) since it was looked at
        aside = Path(tempfile.mkdtemp(prefix=_PRUNED, dir=entry.parent))
        os.replace(entry, aside)  # out of its name in one step, under the lock
    finally:
        os.close(fd)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def release_all() -> None:
    """Let go of every entry this process took (`use`): for a process that outlives the command that used them (a
    test that plays several commands in one process); a prune may then take them once they are old."""
    while _held:
        os.close(_held.popitem()[1])
