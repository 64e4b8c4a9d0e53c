"""How a build reports what it is doing: stages as lines, big transfers (uploads, base layers read)
as a progress bar (stderr)."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

BAR_THRESHOLD = 4 * 1024 * 1024  # smaller transfers finish before a bar is worth drawing


class Progress:
    """Silent. Subclass (or use StderrProgress) to show something."""

    def stage(self, message: str) -> None:
        """One line about what the build is doing now."""

    def transfer(self, label: str, total: int, action: tuple[str, str] = ("uploading", "uploaded")) -> Transfer:
        """A blob of `total` bytes starts moving; advance the returned Transfer as bytes go.
        `action` says what happens to it, while it lasts and when done."""
        return Transfer()


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

    def transfer(self, label: str, total: int, action: tuple[str, str] = ("uploading", "uploaded")) -> Transfer:
        if total < BAR_THRESHOLD:
            return Transfer()
        if getattr(self.stream, "isatty", lambda: False)():
            return _BarTransfer(f"{action[0]} {label}", total, self.stream)
        self.stage(f"  {action[0]} {label} ({total / 1e6:.1f} MB)")
        return _LineTransfer(self, f"{action[1]} {label}", total)


class _BarTransfer(Transfer):
    def __init__(self, label: str, total: int, stream: TextIO):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, desc=f"  {label}", unit="B", unit_scale=True, unit_divisor=1024, file=stream, leave=False
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
        self.owner.stage(f"  {self.done} ({self.total / 1e6:.1f} MB)")
