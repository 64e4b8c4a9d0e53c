"""How a build reports what it is doing: stages as lines, big uploads as a progress bar (stderr)."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

BAR_THRESHOLD = 4 * 1024 * 1024  # smaller transfers finish before a bar is worth drawing


class Progress:
    """Silent. Subclass (or use StderrProgress) to show something."""

    def stage(self, message: str) -> None:
        """One line about what the build is doing now."""

    def transfer(self, label: str, total: int) -> Transfer:
        """A blob of `total` bytes starts moving; advance the returned Transfer as bytes go."""
        return Transfer()


class Transfer:
    def advance(self, nbytes: int) -> None:
        pass

    def restart(self) -> None:
        """A retry starts the blob over."""

    def close(self) -> None:
        pass


class StderrProgress(Progress):
    """Stage lines on stderr; a tqdm bar for uploads over BAR_THRESHOLD when stderr is a terminal,
    else one line when such an upload starts and one when it ends (CI logs stay short)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def stage(self, message: str) -> None:
        with self._lock:
            print(message, file=self.stream, flush=True)

    def transfer(self, label: str, total: int) -> Transfer:
        if total < BAR_THRESHOLD:
            return Transfer()
        if getattr(self.stream, "isatty", lambda: False)():
            return _BarTransfer(label, total, self.stream)
        self.stage(f"  uploading {label} ({total / 1e6:.1f} MB)")
        return _LineTransfer(self, label, total)


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
    def __init__(self, owner: StderrProgress, label: str, total: int):
        self.owner, self.label, self.total = owner, label, total

    def close(self) -> None:
        self.owner.stage(f"  uploaded {self.label} ({self.total / 1e6:.1f} MB)")
