"""Short-lived helper processes that `vdk` runs outside a training run (uv resolving requirements.txt,
perhaps in a thread beside the smoke run): tracked, so that `vdk` stopped by SIGINT, SIGTERM or SIGHUP
ends them before it exits (cli/interrupts.py) instead of leaving them to finish on their own.
Standard library only."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

STOP_GRACE_SECONDS = 2

_running: set[subprocess.Popen] = set()
_lock = threading.Lock()


def run(
    argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True), the process tracked while it runs; raises
    subprocess.TimeoutExpired after `timeout` seconds, the process killed."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _lock:
        _running.add(proc)
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    finally:
        with _lock:
            _running.discard(proc)


@contextmanager
def tracked(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Track a helper started by the caller (one whose output is read as it comes) while the block runs."""
    with _lock:
        _running.add(proc)
    try:
        yield proc
    finally:
        with _lock:
            _running.discard(proc)


def stop_all() -> None:
    """SIGTERM to every tracked process still running, SIGKILL to those still there after a short grace."""
    with _lock:
        running = list(_running)
    for proc in running:
        _signal(proc.terminate)
    for proc in running:
        try:
            proc.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _signal(proc.kill)


def _signal(send) -> None:
    try:
        send()
    except OSError:  # ended meanwhile
        pass
