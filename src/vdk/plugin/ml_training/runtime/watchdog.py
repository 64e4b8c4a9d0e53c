"""The stall watchdog of a training process (cluster runs and `vdk run --full`, never smoke runs): when no
optimizer step has completed on this rank for `stall_timeout` (the first step: `startup_timeout`), the
rank prints one line that says so and the Python stack of every thread, and exits with
`STALL_EXIT_CODE`. The run then fails (or restarts, within max_restarts) and its GPUs are freed, instead
of hanging until max_runtime.

It is a thread that looks at the step counter a few times per timeout: nothing is added to a step. A
rank blocked in a gloo or NCCL collective waits in C++ with the GIL released, so the thread still runs.
A rank whose own thread is in a collective waits a little longer than the others (`collective_grace`):
the rank that stopped stepping without waiting for anyone goes first, and is the one reported.

This module also holds the wire format of what a stalled rank prints and its reader (`parse_stall`),
used by `vdk show` on the rank's log or its container's termination message, and by the local summary:

    [vdk-ml-training] stalled: no optimizer step for 30m on rank 5 (last step 1234)
    [vdk-ml-training] stack rank=5 thread=MainThread (most recent call first)
    [vdk-ml-training] stack rank=5   File "/opt/vdk-ml/job/train.py", line 42, in train
    [vdk-ml-training] stack rank=5     batch = next(batches)

Standard library only: the readers import it too.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TextIO

from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.runtime.progress_lines import duration_seconds
from vdk.plugin.ml_training.vocabulary import wire

# Set in the pods by the renderers and by `vdk run --full` (from the stall_timeout and startup_timeout keys,
# in seconds); absent or 0: no watchdog.
STALL_TIMEOUT = "VDK_ML_TRAINING_STALL_SECONDS"
STARTUP_TIMEOUT = "VDK_ML_TRAINING_STARTUP_SECONDS"
# The defaults of the stall_timeout and startup_timeout keys (job/keys.py takes them from here).
DEFAULT_STALL_SECONDS = 1800
DEFAULT_STARTUP_SECONDS = 3600
# What a stalled rank exits with: `timeout`'s code, so that it reads as "timed out" and differs from 1.
STALL_EXIT_CODE = 124

MARK = wire.mark(wire.STALLED)
STACK_MARK = wire.mark(wire.STACK)
_STALL_LINE = re.compile(
    re.escape(MARK) + r" no optimizer step for (?P<for>\S+) on rank (?P<rank>\S+) "
    r"\((?:last step (?P<last>\d+)|no step yet)[^)]*\)(?: in (?P<collective>[A-Za-z_]+))?"
)
_STACK_LINE = re.compile(re.escape(STACK_MARK) + r" rank=(?P<rank>\S+) ?(?P<text>.*)$")
_THREAD_HEADER = re.compile(r"^thread=(?P<name>.+) \(most recent call first\)$")
THREAD_NAME = "vdk-ml-training-watchdog"
# Frames shown of each thread, innermost first; a termination message holds the training thread's top frames.
STACK_FRAMES = 30
MESSAGE_FRAMES = 8
# torch.distributed's collectives, as they appear in a stack (distributed_c10d.py's own wrappers aside).
_C10D = "distributed_c10d.py"
_C10D_WRAPPERS = ("wrapper", "_exception_logger", "_time_logger")


@dataclass(frozen=True)
class WatchdogSettings:
    """The timeouts of the environment, in seconds; 0 turns that part off."""

    stall_seconds: float = 0
    startup_seconds: float = 0
    problems: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WatchdogSettings:
        env = os.environ if env is None else env
        problems: list[str] = []
        values = []
        for name in (STALL_TIMEOUT, STARTUP_TIMEOUT):
            text = (env.get(name) or "").strip()
            try:
                value = float(text) if text else 0.0
                if not (value >= 0 and math.isfinite(value)):
                    raise ValueError
            except ValueError:
                problems.append(f"{name}={text!r} is not a number of seconds >= 0")
                value = 0.0
            values.append(value)
        return cls(values[0], values[1], tuple(problems))

    @property
    def on(self) -> bool:
        return bool(self.stall_seconds or self.startup_seconds)

    def limit(self, steps: int) -> float:
        """Seconds without a step before a rank that took `steps` steps is stalled (0: never)."""
        return self.stall_seconds if steps else self.startup_seconds

    def env(self) -> dict[str, str]:
        """These settings as the environment of a training process."""
        return {STALL_TIMEOUT: _seconds_text(self.stall_seconds), STARTUP_TIMEOUT: _seconds_text(self.startup_seconds)}


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


@dataclass(frozen=True)
class Stall:
    """A rank that took no optimizer step for `seconds`: where every thread was."""

    rank: str
    seconds: float
    last_step: int | None  # None: no step since the start (the startup timeout)
    collective: str | None = None  # the torch.distributed collective the training thread waits in
    threads: list[tuple[str, list[str]]] = field(default_factory=list)  # (name, frame lines innermost first)

    @property
    def duration(self) -> str:
        return approximate_duration(self.seconds)

    def line(self) -> str:
        """The stall line, as `vdk show` and the local summary read it."""
        waits = f" in {self.collective}" if self.collective else ""
        return f"{MARK} no optimizer step for {self.duration} on rank {self.rank} ({self._last()}){waits}"

    def describe(self) -> str:
        """The line without its mark, for people: "no optimizer step for 30m on rank 5 (last step 1234)"."""
        return f"no optimizer step for {self.duration} on rank {self.rank} ({self._last()}){self._waiting()}"

    def summary(self) -> str:
        """What happened, without the rank: "no optimizer step for 30m (last step 1234)"."""
        return f"no optimizer step for {self.duration} ({self._last()}){self._waiting()}"

    def _last(self) -> str:
        return f"last step {self.last_step}" if self.last_step is not None else "no step yet, startup_timeout"

    def _waiting(self) -> str:
        return f", waiting in the collective {self.collective}" if self.collective else ""

    def top_frames(self, count: int = 5) -> list[str]:
        """The innermost frames of the thread that ran the training code (the main thread), with their code."""
        if not self.threads:
            return []
        name, frames = next(((n, f) for n, f in self.threads if n == "MainThread"), self.threads[0])
        out, shown = [], 0
        for line in frames:
            if line.lstrip().startswith("File "):
                if shown == count:
                    break
                shown += 1
            out.append(line)
        return out

    def lines(self, frames: int = STACK_FRAMES, training_thread_only: bool = False) -> list[str]:
        """The stall line and the stacks, each line marked with the rank."""
        return [self.line(), *stack_lines(self.rank, self.threads, frames, training_thread_only)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "seconds": round(self.seconds, 3),
            "duration": self.duration,
            "last_step": self.last_step,
            "collective": self.collective,
            "line": self.describe(),
            "top_frames": self.top_frames(),
            "threads": [{"name": n, "frames": f} for n, f in self.threads],
        }


def stack_lines(
    rank: str,
    threads: Iterable[tuple[str, Iterable[str]]],
    frames: int = STACK_FRAMES,
    training_thread_only: bool = False,
) -> list[str]:
    """Where every thread was, as the lines that follow a stall or an idle line: each marked with the rank, so that
    the reader (`parse_stacks`) tells them from another rank's output between them."""
    out = []
    for name, stack in threads:
        if training_thread_only and name != "MainThread":
            continue
        out.append(f"{STACK_MARK} rank={rank} thread={name} (most recent call first)")
        out += [f"{STACK_MARK} rank={rank} {line}" for line in _first_frames(stack, frames)]
    return out


def parse_stacks(lines: Iterable[str], rank: str | None = None) -> tuple[str | None, list[tuple[str, list[str]]]]:
    """(rank, [(thread, frame lines)]) of the stack lines in `lines`: those of `rank`, else of the rank of the first
    stack line (None when there is none)."""
    threads: list[tuple[str, list[str]]] = []
    for line in lines:
        stack = _STACK_LINE.search(line)
        if stack is None:
            continue
        rank = rank or stack["rank"]
        if stack["rank"] != rank:
            continue  # another rank's output between its lines
        header = _THREAD_HEADER.match(stack["text"])
        if header:
            threads.append((header["name"], []))
        elif threads:
            threads[-1][1].append(line[stack.start("text") :].rstrip() if stack["text"] else "")
    return rank, threads


def _first_frames(stack: Iterable[str], frames: int) -> list[str]:
    out, seen = [], 0
    for line in stack:
        if line.lstrip().startswith("File "):
            seen += 1
            if seen > frames:
                break
        out.append(line)
    return out


# --- the watchdog ------------------------------------------------------------------------------------


class Watchdog:
    """Watches a step count (`steps()`, 0 until the code imports torch) from a daemon thread.

    `on_stall(stall)` is told first (the local run records it in the rank's result file); then the
    stall is printed to `out` and left as the container's termination message, and the process exits
    with STALL_EXIT_CODE. `clock`, `out` and `exit` are there for tests.
    """

    def __init__(
        self,
        settings: WatchdogSettings,
        rank: str,
        steps: Callable[[], int],
        on_stall: Callable[[Stall], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        out: TextIO | None = None,
        exit: Callable[[int], None] = os._exit,
    ):
        self.settings = settings
        self.rank = rank
        self.steps = steps
        self.on_stall = on_stall
        self._clock = clock
        self._out = out
        self._exit = exit
        self._seen = 0
        self._since = clock()  # when the step count last changed (the start, before any step)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.poll_seconds = poll_interval(settings)
        self.fired: Stall | None = None

    def start(self) -> Watchdog:
        global _current
        if self._thread is None and self.settings.on:
            self._thread = threading.Thread(target=self._watch, name=THREAD_NAME, daemon=True)
            self._thread.start()
            _current = self
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            stall = self.check()
            if stall is not None and not self._stop.is_set():
                self.fire(stall)
                return

    def check(self) -> Stall | None:
        """A Stall when this rank took no step for its limit (plus the grace of a rank in a collective)."""
        now = self._clock()
        try:
            steps = int(self.steps())
        except Exception:  # noqa: BLE001 - a counter that cannot be read is not a stall
            return None
        if steps != self._seen:
            self._seen, self._since = steps, now
            return None
        limit = self.settings.limit(steps)
        idle = now - self._since
        if not limit or idle < limit:
            return None
        collective = training_thread_collective()
        if collective and idle < limit + collective_grace(limit, self.poll_seconds):
            return None  # a rank that waits for the others: let the one that stopped go first
        return Stall(self.rank, idle, steps or None, collective, thread_stacks())

    def fire(self, stall: Stall) -> None:
        """Report the stall everywhere it is read, then end the process."""
        self.fired = stall
        report_and_end(stall, STALL_EXIT_CODE, self.on_stall, self._out, self._exit)


_current: Watchdog | None = None


def start(rank: str, steps: Callable[[], int], on_stall: Callable[[Stall], None] | None = None) -> Watchdog | None:
    """This process's watchdog with the settings of the environment, or None when they turn it off."""
    settings = WatchdogSettings.from_env()
    for problem in settings.problems:
        sys.stderr.write(wire.warning(f"{problem}: ignored") + "\n")
    if not settings.on:
        return None
    return Watchdog(settings, rank, steps, on_stall).start()


def stop_current() -> None:
    """Stop this process's watchdog: it no longer trains itself (it spawned the workers that do)."""
    if _current is not None:
        _current.stop()


def poll_interval(settings: WatchdogSettings) -> float:
    """How often the step count is looked at: 30 times per (shortest) timeout, at most every 10 s."""
    limits = [s for s in (settings.stall_seconds, settings.startup_seconds) if s]
    return min(10.0, max(0.05, min(limits) / 30)) if limits else 10.0


def collective_grace(limit: float, poll_seconds: float) -> float:
    """The extra wait of a rank stalled inside a collective: a tenth of the timeout, from two polls to 5 min."""
    return min(300.0, max(2 * poll_seconds, limit / 10))


def training_thread_collective() -> str | None:
    """The torch.distributed collective the main thread waits in (`all_reduce`, `barrier`, ...), if any."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    found = None
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_C10D) and code.co_name not in _C10D_WRAPPERS:
            found = code.co_name  # the outermost c10d frame is the call the code made
        frame = frame.f_back
    return found


def thread_stacks(limit: int = STACK_FRAMES) -> list[tuple[str, list[str]]]:
    """Every thread's stack, innermost frame first, the main thread first; the watchdog's own left out."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda item: item[0] != main):
        if names.get(ident) == THREAD_NAME:
            continue
        lines = []
        frames = traceback.extract_stack(frame)
        # what ran the code (runpy, this package) is left out, but where the thread is
        shown = [f for f in frames[:-1] if not _is_machinery(f.filename)] + frames[-1:]
        for summary in reversed(shown[-limit:]):
            lines.append(f'  File "{summary.filename}", line {summary.lineno}, in {summary.name}')
            if summary.line:
                lines.append(f"    {summary.line.strip()}")
        out.append((names.get(ident, f"0x{ident:x}"), lines))
    return out


_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))


def _is_machinery(filename: str) -> bool:
    if filename.startswith("<frozen runpy") or os.path.basename(filename) == "runpy.py":
        return True
    return os.path.abspath(filename).startswith(_RUNTIME_DIR + os.sep)  # its sub-packages too (virtual_gpu/)


# --- reading it back ---------------------------------------------------------------------------------


def parse_stall(lines: Iterable[str]) -> Stall | None:
    """The last stall a rank reported in `lines` (a log or a termination message), with its stacks."""
    lines = list(lines)
    found: tuple[int, re.Match] | None = None
    for i, line in enumerate(lines):
        match = _STALL_LINE.search(line)
        if match:
            found = (i, match)
    if found is None:
        return None
    at, match = found
    rank = match["rank"]
    _, threads = parse_stacks(lines[at + 1 :], rank)
    return Stall(
        rank=rank,
        seconds=duration_seconds(match["for"]),
        last_step=int(match["last"]) if match["last"] else None,
        collective=match["collective"],
        threads=threads,
    )


def report_and_end(
    finding: Any,
    code: int,
    callback: Callable[[Any], None] | None,
    out: TextIO | None,
    exit: Callable[[int], None],
    postscript: Callable[[], str | None] | None = None,
) -> None:
    """The end of a process that stops itself (a stall, an idle GPU): `callback(finding)` (its result file),
    `finding.lines()` on `out` or stderr, its termination message (and `postscript()`'s), then `exit(code)`."""
    # Whatever happens below (a full pipe, a lock the training thread holds), the process ends.
    backstop = threading.Timer(30.0, exit, (code,))
    backstop.daemon = True
    backstop.start()
    if callback is not None:
        try:
            callback(finding)
        except Exception:  # noqa: BLE001 - the stop is still printed and the process still ends
            pass
    text = "\n".join(finding.lines()) + "\n"
    try:
        if out is not None:
            out.write(text)
            out.flush()
        else:
            sys.stdout.flush()
            os.write(2, text.encode("utf-8", "replace"))  # the fd: no lock the training thread may hold
    except Exception:  # noqa: BLE001 - a stop that cannot be printed still ends the process
        pass
    termination.leave("\n".join(finding.lines(MESSAGE_FRAMES, training_thread_only=True)))
    if postscript is not None:
        try:
            summary = postscript()
            if summary:
                termination.add(summary)
        except Exception:  # noqa: BLE001 - the summary is extra: the process ends regardless
            pass
    exit(code)
