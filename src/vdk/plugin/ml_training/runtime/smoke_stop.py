"""The end of a smoke run, agreed by its ranks: the first rank that stops as planned (smoke_rank.py: the first
optimizer step of the second epoch, or smoke_steps steps) says so in the run directory, and every other
rank stops at its next optimizer step. Ranks need not reach their planned end at the same point: their
steps, and so their ends, may differ (gradient accumulation that differs per rank, batches one rank
dispatches to the others, uneven data). A rank the stopped one left waiting in a collective is released
when the stopped rank ends (its connections close: it leaves the collective, it does not hang in it), and
the error that collective then raises is the end agreed, not a failure (`ended_by_peer`).

The stop file is written here and read here (one wire format, one module): `RUN_DIR/stop.json`, with the
rank that stopped first and its steps (a rank still behind them takes its steps up to there). Standard library
at import; torch when installing the hook.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.runtime import protocol

STOP_FILE = "stop.json"
# What gloo raises in a collective whose peer ended (its end of the connection closed).
_PEER_GONE = re.compile(
    r"Connection (?:closed|reset) by peer|Broken pipe|transport[/\\]tcp[/\\]|Socket Timeout|"
    r"ProcessGroupGloo.*(?:closed|failed)",
    re.IGNORECASE,
)

_check: Any = None  # this process's check (a worker forked from a rank has its own), called before every step
_hooked = False
_own: int | str | None = None  # this process's rank, once it follows


def stop_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / STOP_FILE


def announce(run_dir: str | Path, rank: int | str, steps: int) -> None:
    """This rank stopped as planned: the others stop too (first come; a later rank's stop changes nothing)."""
    path = stop_file(run_dir)
    if path.exists():
        return
    try:
        protocol.write_json_atomically(path, {"rank": rank, "steps": steps})
    except OSError:
        pass  # the others stop at their own end, or when the collective with this rank ends


def announce_here(steps: int) -> None:
    """This rank reached its planned end (it leaves its training loop, or stops): the others end theirs too."""
    run_dir = os.environ.get(protocol.RUN_DIR)
    if run_dir and _own is not None:
        announce(run_dir, _own, steps)


def stopped_by(run_dir: str | Path) -> dict[str, Any] | None:
    """The rank that stopped first and its steps, once one did."""
    try:
        record = json.loads(stop_file(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def follow(counter: Any, own: int | str, leave: Callable[[], None] | None = None) -> None:
    """Stop this rank (SmokeStepsReached) at its next optimizer step once another rank stopped: before an
    optimizer's step, and after a step the counter saw without one (a manual update). `leave`, when given, is
    called there first: it leaves this rank's training loop too (epochs.py raises), or returns to stop it."""
    run_dir = os.environ.get(protocol.RUN_DIR)
    if not run_dir:
        return

    def check(*_: Any) -> None:
        record = stopped_by(run_dir) if os.path.exists(stop_file(run_dir)) else None
        if record is not None and str(record.get("rank")) != str(own) and _caught_up(counter.steps, record):
            from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

            if leave is not None:
                leave()
            raise SmokeStepsReached(counter.steps)

    def after_step(_counter: Any, optimizer: Any) -> None:
        if optimizer is None:
            check()

    counter.listeners.append(after_step)
    global _check, _hooked, _own
    _check = check
    _own = own
    if not _hooked:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(_before_step)
        _hooked = True


def _caught_up(steps: int, record: dict[str, Any]) -> bool:
    """Whether a rank that took `steps` is where the first one stopped: a rank behind it (DDP's ranks step in
    lockstep, and the first to finish its step may stop before the others took theirs) takes its step; if it
    then waits for the stopped rank in a collective, that collective's end is the agreed end."""
    try:
        return steps >= int(record.get("steps") or 0)
    except (TypeError, ValueError):
        return True


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _check is not None:
        _check()


def ended_by_peer(error: BaseException, run_dir: str | Path) -> dict[str, Any] | None:
    """The stop record, when `error` is a collective that ended because the rank that stopped first ended;
    None when it is an error of its own."""
    record = stopped_by(run_dir)
    if record is None:
        return None
    seen: set[int] = set()
    chain: BaseException | None = error
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if _is_peer_gone(chain):
            return record
        chain = chain.__cause__ or chain.__context__
    return None


def _is_peer_gone(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & {"DistNetworkError", "DistBackendError"}:
        return True
    return isinstance(error, RuntimeError) and bool(_PEER_GONE.search(str(error)))
