"""Stopping a run's processes: SIGTERM to their process groups (ranks dump their stacks) and to every
descendant of torchrun's agent — also those in sessions of their own and daemons that double-forked, which
the agent, a child subreaper, adopts — then SIGKILL to whatever is left after a short grace. Used by `vdk`
(local/launcher.py) and by torchrun's agent itself (local/torchrun_agent.py: when the run ends, and when `vdk`
is gone). Standard library only.

Each process gets one SIGTERM: a rank answers it by dumping its threads' stacks (runtime/rank_process.py), and
faulthandler, which chains to the default action, ends the rank at once when a second SIGTERM comes in the
middle of the dump — where it was would be cut short."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path

from vdk.plugin.ml_training.runtime import protocol

# After SIGTERM, how long ranks get to dump their stacks and exit before SIGKILL.
TERMINATE_GRACE_SECONDS = 3.0


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


def descendants(pid: int) -> set[int]:
    """Every process below `pid`: its children, theirs, and so on (Linux: /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in found and child != pid:
                found.add(child)
                todo.append(child)
    return found


def running(pid: int) -> bool:
    """Whether `pid` is a process that still runs (a zombie has ended: only its parent's wait is missing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)  # no /proc (macOS): alive as far as signals know
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return state not in ("Z", "X")


def leftovers_of_ended_ranks(root: int, ranks: Mapping[int | str, int], expected: int) -> set[int]:
    """The processes below `root` (torchrun's agent, their subreaper) that ranks which have ended left behind.
    `ranks`: rank -> pid, of the `expected` local ranks (and the launcher of a script that spawns its workers).
    While some ranks run: the processes whose environment names an ended rank (RANK, as torchrun sets it; a
    process forked without exec shows its first environment, not this). Once every rank has ended: every
    process still below `root`, but multiprocessing's helpers (forked daemons have the agent's command line and
    no RANK to tell). What a running rank started is never a leftover: the workers of a script's second
    mp.spawn (which inherit its RANK) were SIGTERMed as leftovers of the first spawn's workers (the same ranks,
    reported as ended), and mp.spawn reported a crash."""
    ended = {str(rank) for rank, pid in ranks.items() if not running(pid)}
    if not ended:
        return set()
    started_by_running: set[int] = set()
    for pid in ranks.values():
        if running(pid):
            started_by_running |= descendants(pid)
    below = {p for p in descendants(root) - set(ranks.values()) - started_by_running if running(p)}
    if len(ended) == len(ranks) >= expected:
        return {p for p in below if b"multiprocessing" not in _read(p, "cmdline")}
    return {p for p in below if _environ(p, "RANK") in ended}


def _read(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _environ(pid: int, name: str) -> str | None:
    prefix = name.encode() + b"="
    for entry in _read(pid, "environ").split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def stop_tree(
    root: int,
    groups: Iterable[int] = (),
    grace_seconds: float = TERMINATE_GRACE_SECONDS,
    poll: Callable[[], object] | None = None,
    include_root: bool = True,
) -> None:
    """Stop `root` (unless not `include_root`: the caller itself), every process below it, whatever its session,
    and the process `groups`: SIGTERM to all, then, after `grace_seconds` or once none runs, SIGKILL to what
    is left, the descendants before `root`. Processes found below `root` at any time in between are
    remembered, so that one whose parent ended (reparented away from `root`) is still stopped."""
    groups = set(groups)
    known = descendants(root)
    signalled = groups | ({root} if include_root else set())
    signal_groups(signalled, signal.SIGTERM)
    _signal(_outside(known, signalled), signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        new = descendants(root) - known
        _signal(_outside(new, signalled), signal.SIGTERM)
        known |= new
        if (
            not any(running(p) for p in known)
            and not any(alive(g) for g in groups)
            and not (include_root and running(root))
        ):
            break
        time.sleep(0.05)
        if poll is not None:
            poll()
    known |= descendants(root)
    _signal(known, signal.SIGKILL)
    signal_groups(groups, signal.SIGKILL)
    if include_root:
        signal_groups({root}, signal.SIGKILL)
        _signal({root}, signal.SIGKILL)


def stop_through_agent(
    agent: int,
    run_dir: str | Path | None,
    grace_seconds: float = TERMINATE_GRACE_SECONDS,
    poll: Callable[[], object] | None = None,
) -> None:
    """Stop a run as a cluster does (the kubelet, `podman stop`): SIGTERM to torchrun's agent alone, which passes
    it on to each rank once and waits for them. Signalling the ranks from here too would give them a second one
    (and the agent, seeing one rank end, signals the others again); so nothing more is sent until the ranks
    have ended or the grace period is over. Then stop_tree for whatever is left (the agent, what the ranks
    left behind, a rank the agent did not reach)."""
    ranks = rank_pids(run_dir) or children(agent)
    if running(agent) and any(running(p) for p in ranks):
        _signal({agent}, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and any(running(p) for p in ranks):
            time.sleep(0.05)
            if poll is not None:
                poll()
    stop_tree(agent, rank_groups(agent, run_dir), grace_seconds, poll)


def _outside(pids: Iterable[int], groups: set[int]) -> set[int]:
    """The `pids` that are not in one of `groups` (already signalled through their group)."""
    found = set()
    for pid in pids:
        try:
            if os.getpgid(pid) in groups:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        found.add(pid)
    return found


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap() -> None:
    """Collect the exit status of every child that has ended (a subreaper's adopted orphans leave zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux's PR_SET_CHILD_SUBREAPER): a daemon a rank
    double-forks stays below it, where it can be found and stopped. False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def rank_groups(torchrun_pid: int, run_dir: str | Path | None) -> set[int]:
    """The process groups of a run's ranks besides torchrun's own: its children (forked ranks share its
    group; spawned ones lead their own) and the ranks that wrote their pid in the run directory."""
    return children(torchrun_pid) | rank_pids(run_dir)


def rank_pids(run_dir: str | Path | None) -> set[int]:
    """The ranks that wrote their pid in the run directory (runtime/report.py, as soon as they start)."""
    if not run_dir:
        return set()
    records = protocol.read_results(Path(run_dir)).values()
    return {int(r["pid"]) for r in records if isinstance(r.get("pid"), int)}
