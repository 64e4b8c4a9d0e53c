"""The idle policy (opt-in, `idle_timeout`): a run whose GPUs all stay below the idle threshold of SM activity
for that long after its first optimizer step is stopped, the way the stall watchdog stops a hung one. The GPU
sampler of each node (runtime/gpu_sampler.py) feeds it one verdict per sample; when it fires, the process
prints one line that says so and the Python stack of every thread, leaves them as the container's termination
message, and exits with `IDLE_EXIT_CODE`. The run then fails (or restarts, within max_restarts) and its GPUs
are freed.

The trade-off: a run that waits on purpose with its GPUs idle — a long evaluation on the CPU, a checkpoint
upload, data preparation between epochs — is stopped too. Each node decides over its own GPUs.

This module also holds the wire format of what an idle-stopped process prints and its reader (`parse_idle`):

    [vdk-ml-training] idle: every GPU of node 0 below 5% SM activity for 2h (last step 1234); stopped by idle_timeout
    [vdk-ml-training] stack rank=0 thread=MainThread (most recent call first)
    [vdk-ml-training] stack rank=0   File "/opt/vdk-ml/job/train.py", line 42, in train

Standard library only: the readers import it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.runtime.progress_lines import duration_seconds
from vdk.plugin.ml_training.runtime.watchdog import STACK_FRAMES
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import parse_stacks
from vdk.plugin.ml_training.runtime.watchdog import report_and_end
from vdk.plugin.ml_training.runtime.watchdog import stack_lines
from vdk.plugin.ml_training.runtime.watchdog import thread_stacks
from vdk.plugin.ml_training.vocabulary import wire

# What an idle-stopped process exits with: distinct from a failure (1) and from the stall watchdog's 124.
IDLE_EXIT_CODE = 123
# Below this SM activity (percent) a GPU counts as idle, for the policy and for `vdk list --usage`.
IDLE_PERCENT = 5.0
MARK = wire.mark(wire.IDLE)
ERROR_TYPE = "IdleTimeout"  # a local rank's reported error when the policy stopped it
_IDLE_LINE = re.compile(
    re.escape(MARK) + r" every GPU of node (?P<node>\S+) below (?P<percent>[\d.]+)% \S+ activity for "
    r"(?P<for>\S+) \((?:last step (?P<last>\d+)|no step yet)\)"
)


@dataclass(frozen=True)
class Idle:
    """A node whose GPUs all sat below `percent` for `seconds` after its first step: where every thread was."""

    node: str
    seconds: float
    percent: float
    last_step: int | None
    rank: str = "0"
    threads: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def describe(self) -> str:
        last = f"last step {self.last_step}" if self.last_step is not None else "no step yet"
        return (
            f"every GPU of node {self.node} below {self.percent:g}% SM activity for "
            f"{approximate_duration(self.seconds)} ({last})"
        )

    def line(self) -> str:
        """The idle line, as `vdk show` and the local summary read it."""
        return f"{MARK} {self.describe()}; stopped by idle_timeout"

    def as_stall(self) -> Stall:
        """Its stacks in the stall watchdog's shape, which `vdk show` and the local summary know how to show."""
        return Stall(self.rank, self.seconds, self.last_step, None, [(n, list(f)) for n, f in self.threads])

    def lines(self, frames: int = STACK_FRAMES, training_thread_only: bool = False) -> list[str]:
        """The idle line and the stacks, each line marked with the rank (the stall watchdog's stack lines)."""
        return [self.line(), *stack_lines(self.rank, self.threads, frames, training_thread_only)]

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "seconds": round(self.seconds, 3),
            "duration": approximate_duration(self.seconds),
            "percent": self.percent,
            "last_step": self.last_step,
            "line": self.describe(),
            "top_frames": self.as_stall().top_frames(),
        }


class IdlePolicy:
    """Told after every sample whether all the node's GPUs were below the threshold; fires once they were for
    `seconds` after the first step. `exit` and `out` are there for tests."""

    def __init__(
        self,
        seconds: float,
        node: str,
        rank: str,
        percent: float = IDLE_PERCENT,
        on_idle: Callable[[Idle], None] | None = None,
        out: TextIO | None = None,
        exit: Callable[[int], None] = os._exit,
        postscript: Callable[[], str | None] | None = None,
    ):
        self.seconds = seconds
        self.node = node
        self.rank = rank
        self.percent = percent
        self.on_idle = on_idle
        self._out = out
        self._exit = exit
        self._postscript = postscript
        self._since: float | None = None
        self.fired: Idle | None = None

    def observe(self, now: float, all_idle: bool, trained: bool, steps: int) -> Idle | None:
        """One sample's verdict; the Idle it fired on, if it did."""
        if not trained or not all_idle:
            self._since = None
            return None
        if self._since is None:
            self._since = now
        if now - self._since < self.seconds or self.fired is not None:
            return None
        idle = Idle(self.node, now - self._since, self.percent, steps or None, self.rank, _stacks())
        self.fire(idle)
        return idle

    def fire(self, idle: Idle) -> None:
        """Report the stop everywhere it is read, then end the process."""
        self.fired = idle
        report_and_end(idle, IDLE_EXIT_CODE, self.on_idle, self._out, self._exit, self._postscript)


SAMPLER_THREAD = "vdk-ml-training-gpu-sampler"


def _stacks() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every thread's stack but the GPU sampler's (whose thread fires the policy)."""
    return tuple((name, tuple(frames)) for name, frames in thread_stacks() if name != SAMPLER_THREAD)


def parse_idle(lines: Iterable[str]) -> Idle | None:
    """The idle stop a process reported in `lines` (a log or a termination message), with its stacks."""
    lines = list(lines)
    for i, line in enumerate(lines):
        match = _IDLE_LINE.search(line)
        if match is None:
            continue
        rank, stacks = parse_stacks(lines[i + 1 :])  # the stall watchdog's stack lines, of the node's rank
        threads = tuple((n, tuple(f)) for n, f in stacks)
        return Idle(
            node=match["node"],
            seconds=duration_seconds(match["for"]),
            percent=float(match["percent"]),
            last_step=int(match["last"]) if match["last"] else None,
            rank=rank or "0",
            threads=threads,
        )
    return None
