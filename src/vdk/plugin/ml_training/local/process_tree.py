"""Stopping a run's processes: SIGTERM to their process groups (ranks dump their stacks), SIGKILL to
whatever is left after a short grace. Used by `vdk` (local/launcher.py) and, when `vdk` is gone, by
torchrun's agent itself (local/torchrun_agent.py). Standard library only."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path

from vdk.plugin.ml_training.runtime import protocol

# After SIGTERM, how long ranks get to dump their stacks and exit before SIGKILL.
TERMINATE_GRACE_SECONDS = 3.0


def stop_groups(
    groups: Iterable[int],
    grace_seconds: float = TERMINATE_GRACE_SECONDS,
    poll: Callable[[], None] | None = None,
    last: int | None = None,
) -> None:
    """SIGTERM every group, SIGKILL those still alive after `grace_seconds` (`poll` runs while waiting:
    reaping a child that ended). `last`: a group killed after the others (the caller's own)."""
    groups = set(groups)
    everyone = groups | ({last} if last is not None else set())
    signal_groups(everyone, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and any(alive(g) for g in everyone):
        time.sleep(0.05)
        if poll is not None:
            poll()
    signal_groups(groups, signal.SIGKILL)
    if last is not None:
        signal_groups({last}, signal.SIGKILL)


def signal_groups(groups: Iterable[int], sig: signal.Signals) -> None:
    for group in groups:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def children(pid: int) -> set[int]:
    """The direct children of `pid` (Linux: /proc; elsewhere none are known)."""
    found: set[int] = set()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.update(int(p) for p in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return found


def rank_groups(torchrun_pid: int, run_dir: str | Path | None) -> set[int]:
    """The process groups of a run's ranks besides torchrun's own: its children (forked ranks share its
    group; spawned ones lead their own) and the ranks that wrote their pid in the run directory."""
    groups = children(torchrun_pid)
    if run_dir:
        records = protocol.read_results(Path(run_dir)).values()
        groups |= {int(r["pid"]) for r in records if isinstance(r.get("pid"), int)}
    return groups
