"""faulthandler's dumps, as the runtime writes them for a rank that crashed or was stopped (runtime/
bootstrap.py enables faulthandler into the rank's stack file): whether the interpreter crashed, and
where the rank's own thread was in the job's code."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vdk.plugin.ml_training.runtime import protocol

# faulthandler's header when the interpreter itself crashed (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL).
_CRASH = re.compile(r"Fatal Python error: ([^\n]+)")


def crash(dump: str) -> str | None:
    """'Segmentation fault', ... when the dump says the interpreter crashed; None for a stack dumped
    on request (faulthandler's answer to SIGTERM)."""
    match = _CRASH.search(dump)
    return match.group(1).strip() if match else None


# Frames of what started the user's code: runpy, imports, torchrun's agent (ranks are forked from
# it), the plugin, and the `-c` program of a worker that multiprocessing spawned.
_MACHINERY = re.compile(
    r'File "(<frozen (runpy|importlib)|.*/multiprocessing/|.*/torch/distributed/(elastic|launcher|run\.py)'
    r"|.*/vdk/plugin/ml_training/(runtime|local)/"
    r'|<string>", line 1 in <module>$)'  # the program a spawned worker starts with (runtime/smoke_rank.py)
)


# Said when the rank's dump ends before its main thread's outermost frame: the rank was ended while writing it.
CUT_SHORT = "(the rest of its stack was not recorded: the rank was ended while writing it)"
NOT_RECORDED = "(its main thread's stack was not recorded: the rank was ended while writing its stacks)"

# A whole frame line as faulthandler writes it (a dump cut short may end in the middle of one).
_FRAME = re.compile(r'File ".*", line \d+ in \S+$')


def user_stack(dump: str, job_dir: Path, limit: int = 8) -> list[str]:
    """From a faulthandler dump (innermost frame first): where the rank's own thread was, and the
    job's own frames that led there; a line saying so when the dump was cut short."""
    if not protocol.has_dump(dump):
        return []
    entry = protocol.main_entry_of(dump)  # None in a file of an older version: nothing to tell a cut dump by
    block = _rank_thread(dump, job_dir, entry is not None)
    if block is None:
        return [f"  {NOT_RECORDED}"]
    frames = _frames(block)
    cut = entry is not None and _cut_short(block, entry)
    if not frames:
        return [f"  {CUT_SHORT}"] if cut else []
    own = [f for f in frames if _is_own(f, job_dir)]
    shown = frames[:1] + [f for f in own if f != frames[0]][: limit - 1]
    if len(shown) > 1 and shown[1] != frames[1]:
        shown.insert(1, "...")  # library frames between where it was and the job's own code
    return [f"  {f}" for f in shown] + ([f"  {CUT_SHORT}"] if cut else [])


def _cut_short(block: str, entry: tuple[str, str]) -> bool:
    """Whether the rank's thread's block stops before its outermost frame `entry` (file, function), which the stack
    file's header names (faulthandler's own limit, 100 frames, ends a block with '...')."""
    lines = [x.strip() for x in block.rstrip("\n").splitlines()[1:] if x.strip()]
    if not lines:
        return True
    file, function = entry
    return not (
        lines[-1] == "..." or (lines[-1].startswith(f'File "{file}", line ') and lines[-1].endswith(f" in {function}"))
    )


def _rank_thread(dump: str, job_dir: Path, whole_when_named: bool) -> str | None:
    """The dump's block of the thread that was running the job's code; None when the header names the rank's
    main thread, `whole_when_named` (it names the thread's outermost frame too: a dump without that thread's block
    was cut short), and the dump has no block of it.

    The rank names its main thread at the top of its stack file (runtime/protocol.py): that block, whatever
    thread received the signal and however the threads are listed. A process forked from the rank (a
    DataLoader worker) may dump into the same file, its main thread with the same id: then the block that
    ran the job's code, else the rank's own dump, the first. A file without that line (or whose thread is
    not in it): faulthandler's "Current thread" when it ran the job's code, then any thread that did, then
    the current one anyway."""
    blocks = [b for b in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump) if "most recent call first" in b]
    main = protocol.main_thread_of(dump)
    if not blocks:
        return None if main and whole_when_named else dump
    own = [b for b in blocks if any(_is_own(f, job_dir) for f in _frames(b))]
    mains = [b for b in blocks if main and _thread_id(b) == main]
    if mains:
        return ([b for b in mains if b in own] + mains)[0]
    if main and whole_when_named:
        return None  # faulthandler lists the main thread last: the dump ended before it
    current = [b for b in blocks if b.lstrip().startswith("Current thread")]
    ranked = [b for b in current if b in own] + own + current + blocks
    return ranked[0]


def _thread_id(block: str) -> str:
    match = re.search(r"(?:Current thread|Thread) (0x[0-9a-f]+)", block)
    return match.group(1) if match else ""


def _frames(block: str) -> list[str]:
    return [x.strip() for x in block.splitlines() if _FRAME.match(x.strip()) and not _MACHINERY.search(x)]


def _is_own(frame: str, job_dir: Path) -> bool:
    return f'File "{job_dir}{os.sep}' in frame
