"""How much memory the ranks of a local run had: their peak resident memory (VmHWM), sampled from /proc
while the run lasts, so that a rank the out-of-memory killer ends (SIGKILL, no last word of its own) is
reported with what it had. Linux only; elsewhere nothing is known."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from vdk.plugin.ml_training.runtime import protocol

SAMPLE_SECONDS = 0.25


class MemoryWatch:
    """A thread that keeps, per rank (result-file name), the highest peak resident memory seen."""

    def __init__(self, run_dir: Path, interval: float = SAMPLE_SECONDS):
        self.run_dir = run_dir
        self.interval = interval
        self.peaks: dict[int | str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vdk-ml-memory", daemon=True)

    def __enter__(self) -> MemoryWatch:
        if os.path.isdir("/proc/self"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.sample()  # ranks still alive at the end

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        records: dict[int | str, dict] = dict(protocol.read_results(self.run_dir).items())
        launcher = protocol.read_launcher(self.run_dir)
        if launcher is not None:
            records[protocol.LAUNCHER] = launcher
        for name, record in records.items():
            pid = record.get("pid")
            peak = peak_resident_bytes(pid) if isinstance(pid, int) else None
            if peak is not None and peak > self.peaks.get(name, 0):
                self.peaks[name] = peak


def peak_resident_bytes(pid: int) -> int | None:
    """VmHWM of a live process, in bytes (None when it is gone or unknown)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_memory_bytes() -> int | None:
    """This machine's physical memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
