"""How a build reports what it is doing: stages as lines, big transfers (uploads, base layers read) as a
progress bar, and waits of unknown length (resolving and installing requirements.txt) as their steps with a
heartbeat: on a terminal (stderr) one line that keeps changing, with the bytes downloaded as a bar when they are
known; in a log a line per step and one every HEARTBEAT_SECONDS of silence, so that no wait is mute."""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TextIO

from vdk.plugin.ml_training.vocabulary.human_units import size_text

BAR_THRESHOLD = 4 * 1024 * 1024  # smaller transfers finish before a bar is worth drawing
HEARTBEAT_SECONDS = 10.0  # in a log: a line after this long without one, while an activity lasts
REDRAW_SECONDS = 0.5  # on a terminal: how often an activity's line shows the time it has taken


class Progress:
    """Silent. Subclass (or use StderrProgress) to show something."""

    def stage(self, message: str) -> None:
        """One line about what the build is doing now."""

    def transfer(self, label: str, total: int, action: tuple[str, str] = ("uploading", "uploaded")) -> Transfer:
        """A blob of `total` bytes starts moving; advance the returned Transfer as bytes go.
        `action` says what happens to it, while it lasts and when done."""
        return Transfer()

    def activity(self, label: str) -> Activity:
        """A wait of unknown length starts (`label`: "dependencies"): tell its steps, and the bytes it downloads
        when it knows them, until `close()`."""
        return Activity()


class Activity:
    """A wait of unknown length: silent. StderrProgress's shows it."""

    def step(self, text: str) -> None:
        """What it does now ("resolved 31 packages in 1.2 s", "downloading torch (760 MiB)")."""

    def expect(self, nbytes: int) -> None:
        """It will download `nbytes` more."""

    def advance(self, nbytes: int) -> None:
        """It downloaded `nbytes` more."""

    def close(self) -> None:
        pass


class Transfer:
    def advance(self, nbytes: int) -> None:
        pass

    def restart(self) -> None:
        """A retry starts the blob over."""

    def close(self) -> None:
        pass


class StderrProgress(Progress):
    """Stage lines on stderr; a tqdm bar for transfers over BAR_THRESHOLD when stderr is a terminal,
    else one line when such a transfer starts and one when it ends (CI logs stay short)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def stage(self, message: str) -> None:
        with self._lock:
            print(message, file=self.stream, flush=True)

    def terminal(self) -> bool:
        """Whether it draws bars (stderr is a terminal) rather than lines."""
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def transfer(self, label: str, total: int, action: tuple[str, str] = ("uploading", "uploaded")) -> Transfer:
        if total < BAR_THRESHOLD:
            return Transfer()
        if self.terminal():
            return _BarTransfer(f"{action[0]} {label}", total, self.stream)
        self.stage(f"  {action[0]} {label} ({size_text(total)})")
        return _LineTransfer(self, f"{action[1]} {label}", total)

    def activity(self, label: str) -> Activity:
        if self.terminal():
            return _BarActivity(label, self.stream)
        return _LineActivity(self, label)


class LineProgress(StderrProgress):
    """Lines only, each through `say` with `prefix`: for work that runs beside other output (the pre-flight
    checks beside the smoke run), where a bar would be torn by the lines around it. After a prefix that ends a
    phrase (`Pre-flight: `), a stage's first word is written as the middle of a sentence writes it: the build's
    `Dependencies: 3 packages` and the activity's `dependencies: installing` read as one word."""

    def __init__(self, say: Callable[[str], None], prefix: str = ""):
        super().__init__()
        self.say, self.prefix = say, prefix

    def terminal(self) -> bool:
        return False

    def stage(self, message: str) -> None:
        text = message.strip()
        if self.prefix.rstrip().endswith(":") and text[:1].isupper() and text[1:2].islower():
            text = text[0].lower() + text[1:]  # `Dependencies` -> `dependencies`; `NCCL`, `GPU` stay
        with self._lock:
            self.say(f"{self.prefix}{text}")


class _BarTransfer(Transfer):
    def __init__(self, label: str, total: int, stream: TextIO):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, desc=f"  {label}", unit="B", unit_scale=True, unit_divisor=1000, file=stream, leave=False
        )

    def advance(self, nbytes: int) -> None:
        self.bar.update(nbytes)

    def restart(self) -> None:
        self.bar.reset()

    def close(self) -> None:
        self.bar.close()


class _LineTransfer(Transfer):
    def __init__(self, owner: StderrProgress, done: str, total: int):
        self.owner, self.done, self.total = owner, done, total

    def close(self) -> None:
        self.owner.stage(f"  {self.done} ({size_text(self.total)})")


class _LineActivity(Activity):
    """A line per step; while no step comes, `still working, N s so far` every HEARTBEAT_SECONDS."""

    def __init__(self, owner: StderrProgress, label: str, heartbeat: float | None = None):
        self.owner, self.label = owner, label
        self.heartbeat = HEARTBEAT_SECONDS if heartbeat is None else heartbeat
        self.started = time.monotonic()
        self.current = "started"
        self._said = time.monotonic()
        self._lock = threading.Lock()
        self._done = threading.Event()
        _ticking(self, "_beat", self._done, min(self.heartbeat, 1.0), f"vdk-ml-{label}-heartbeat")

    def step(self, text: str) -> None:
        with self._lock:
            self.current = text
            self._said = time.monotonic()
        self.owner.stage(f"  {self.label}: {text}")

    def close(self) -> None:
        self._done.set()

    def _beat(self) -> None:
        with self._lock:
            quiet = time.monotonic() - self._said
            if quiet < self.heartbeat:
                return
            self._said = time.monotonic()
            current = self.current
        elapsed = time.monotonic() - self.started
        self.owner.stage(f"  {self.label}: still working, {elapsed:.0f} s so far (last: {current})")


class _BarActivity(Activity):
    """One line that changes: the current step, the time taken, and the bytes downloaded once they are known."""

    def __init__(self, label: str, stream: TextIO):
        from tqdm import tqdm

        self.label = label
        self.bar = tqdm(total=None, desc=f"  {label}", unit="B", unit_scale=True, unit_divisor=1000, file=stream,
                        leave=False, bar_format="{desc} {elapsed}{postfix}")  # fmt: skip
        self._lock = threading.Lock()
        self._done = threading.Event()
        _ticking(self, "_redraw", self._done, REDRAW_SECONDS, f"vdk-ml-{label}-redraw")

    def step(self, text: str) -> None:
        with self._lock:
            self.bar.set_description_str(f"  {self.label}: {text}", refresh=True)

    def expect(self, nbytes: int) -> None:
        with self._lock:
            self.bar.total = (self.bar.total or 0) + nbytes
            self.bar.bar_format = "{desc} {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} {elapsed}"
            self.bar.refresh()

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.bar.update(nbytes)

    def close(self) -> None:
        self._done.set()
        with self._lock:
            self.bar.close()

    def _redraw(self) -> None:
        with self._lock:
            if not self.bar.disable:
                self.bar.refresh()


def _ticking(activity: Activity, method: str, done: threading.Event, every: float, name: str) -> None:
    """A thread that calls `activity.<method>()` every `every` seconds until `done` is set or the activity is
    gone. It holds the activity weakly: an activity dropped without close() (an exception raised between its
    making and the `try` that closes it: a signal handler's, say) does not tick on into whatever runs next."""
    ref = weakref.ref(activity)

    def tick() -> None:
        while not done.wait(every):
            owner = ref()
            if owner is None:
                return
            getattr(owner, method)()
            del owner

    threading.Thread(target=tick, name=name, daemon=True).start()
