"""One top-level handler for every ML command (the verbs of cli/verbs.py and `vdk run` of an ml-training job):
whatever goes wrong that no part of the plugin turned into an MLTrainingError — a bug, a library's exception, the
operating system's — ends the command with one message that names it and where it happened, exit status 1. Never
a silent exit: vdk-core drops an exception it does not know (it prints it only with LOG_STACK_TRACE_ON_EXIT), also
with `-v DEBUG`. A full disk (ENOSPC, EDQUOT) is said as such: `the disk is full at PATH`, with what is free there
and where to make room. The traceback goes to the log at DEBUG (`vdk -v DEBUG ...`).

Standard library and click only: every vdk command imports this module."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from vdk.plugin.ml_training.cli.context import MLCommandError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.vocabulary.human_units import size_text
from vdk.plugin.ml_training.vocabulary.local_cache import CACHE_DIR
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

FULL = (errno.ENOSPC, errno.EDQUOT)
PACKAGE = Path(__file__).resolve().parents[1]  # .../vdk/plugin/ml_training
# click's own ways of ending a command (a usage error, --help, a declined prompt): theirs to report.
_CLICKS = (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)

log = logging.getLogger(__name__)


class DiskFullError(MLTrainingError):
    """A disk that a command writes to filled up (ENOSPC, EDQUOT): where, and how much is free there now."""

    def __init__(self, place: Path, problem: str, fix: str):
        self.place = place
        super().__init__(problem, fix)


@contextmanager
def reported() -> Iterator[None]:
    """Within: an exception that is neither an MLTrainingError (the caller reports those), a signal's
    KeyboardInterrupt nor click's own becomes an MLCommandError that says what it was (`as_error`); its traceback
    is logged at DEBUG."""
    try:
        yield
    except MLTrainingError:
        raise
    except _CLICKS:
        raise
    except Exception as e:
        log.debug("The unexpected error, as Python saw it:", exc_info=True)
        raise MLCommandError(as_error(e)) from e


def as_error(error: BaseException) -> MLTrainingError:
    """`error` as one a user can act on: itself when it is one, a DiskFullError for a full disk, else the error's
    type, its words and where in the plugin it happened."""
    if isinstance(error, MLTrainingError):
        return error
    full = full_disk(error)
    if full is not None:
        return disk_full(full)
    return MLTrainingError(
        f"the command stopped on an unexpected error{where(error)}: {type(error).__name__}: {error}",
        "nothing the plugin checks explains it: run the command again with `vdk -v DEBUG ...` to see its traceback; "
        "if it happens again, report it with that output (a bug of vdk-ml-training or of a library it uses)",
    )


def full_disk(error: BaseException) -> OSError | None:
    """The OSError of a full disk behind `error` (itself, its cause or its context), if any."""
    seen: set[int] = set()
    item: BaseException | None = error
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno in FULL:
            return item
        item = item.__cause__ or item.__context__
    return None


def disk_full(error: OSError) -> DiskFullError:
    """`the disk is full at PATH`: the directory of the file being written when the error names one, else the
    fullest of the places a command writes to (the temporary directory, the cache), with what is free there."""
    written = os.fsdecode(error.filename) if isinstance(error.filename, (str, bytes, os.PathLike)) else None
    places = [_existing(Path(written).parent)] if written else [Path(tempfile.gettempdir()), cache_root()]
    free: list[tuple[int, Path]] = []
    for place in places:
        existing = _existing(place)
        try:
            free.append((shutil.disk_usage(existing).free, place))
        except OSError:
            continue
    room, place = min(free) if free else (0, places[0])
    what = f" while writing {written}" if written else ""
    problem = (
        f"the disk is full at {place}: {error.strerror or os.strerror(error.errno or errno.ENOSPC)}{what} "
        f"({size_text(room)} free there now, once the unfinished files were removed)"
    )
    return DiskFullError(place, problem, _make_room(place))


def _make_room(place: Path) -> str:
    """What to do about a full disk at `place`, for the place it is."""
    moves = []
    if _below(place, Path(tempfile.gettempdir())):
        moves.append("set TMPDIR to a directory on a disk with room (images are assembled there)")
    if _below(place, cache_root()):
        moves.append(f"set {CACHE_DIR} to a directory on a disk with room")
    elsewhere = f", or {' and '.join(moves)}" if moves else ""
    return f"free space on the disk of {place}{elsewhere}; then run the command again"


def _below(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return True


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def where(error: BaseException) -> str:
    """` in image/build.py line 198 (assemble)`: the innermost frame of the plugin the error passed through, and
    ` (raised in tarfile.py line 2030)` when it was raised outside it; "" without a traceback."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    if not frames:
        return ""
    ours = [f for f in frames if _below(Path(f.filename), PACKAGE)]
    last = frames[-1]
    text = ""
    if ours:
        frame = ours[-1]
        text = f" in {Path(frame.filename).resolve().relative_to(PACKAGE)} line {frame.lineno} ({frame.name})"
    if not ours or ours[-1] is not last:
        text += f" (raised in {Path(last.filename).name} line {last.lineno})"
    return text
