"""A smoke run that has been quiet says how far it got: no new optimizer step for QUIET_SECONDS (loading data or
a model, a long first step, a hang) prints one line with the time so far, each rank's steps, and when the run
will be stopped — then again every QUIET_SECONDS while it stays so. The steps come from the ranks' result files
(runtime/protocol.py reads what runtime/report.py writes). Full runs have rank 0's progress lines instead."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.units import format_duration

QUIET_SECONDS = 15.0


def steps_so_far(run_dir: Path) -> dict[int, int]:
    """Each rank's optimizer steps as its result file says (ranks that have not written one yet are absent)."""
    return {rank: int(result.get("steps") or 0) for rank, result in sorted(protocol.read_results(run_dir).items())}


def quiet_line(elapsed: float, steps: dict[int, int], planned: int, timeout: int | None) -> str:
    """`smoke run: 45 s so far, rank 0: 1 of 2 steps, rank 1: 0 of 2 steps; still running, smoke_timeout stops it
    in 9m15s (at 10m)`: it goes on, and when it would be stopped (it read as if it had stopped)."""
    if not steps:
        where = "no rank has started its script yet"
    elif not any(steps.values()):
        where = f"no optimizer step yet ({len(steps)} rank{'s' if len(steps) != 1 else ''} started)"
    else:
        where = ", ".join(f"rank {rank}: {taken} of {planned} steps" for rank, taken in steps.items())
    left = format_duration(max(0, int(timeout - elapsed))) if timeout else ""
    end = f"; still running, smoke_timeout stops it in {left} (at {format_duration(timeout)})" if timeout else ""
    return f"smoke run: {elapsed:.0f} s so far, {where}{end}"


class Heartbeat:
    """Called now and then while a smoke run lasts (`tick()`): says `quiet_line` through `say` after every
    QUIET_SECONDS without a new step."""

    def __init__(self, run_dir: Path, planned: int, timeout: int | None, say: Callable[[str], None]):
        self.run_dir, self.planned, self.timeout, self.say = run_dir, planned, timeout, say
        self.started = self._since = time.monotonic()
        self._steps: dict[int, int] = {}

    def tick(self) -> None:
        now = time.monotonic()
        steps = steps_so_far(self.run_dir)
        if steps != self._steps:
            self._steps, self._since = steps, now
        elif now - self._since >= QUIET_SECONDS:
            self.say(quiet_line(now - self.started, steps, self.planned, self.timeout))
            self._since = now
