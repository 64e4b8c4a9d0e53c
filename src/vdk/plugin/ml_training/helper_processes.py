"""Short-lived helper processes that `vdk` runs outside a training run (uv resolving requirements.txt,
perhaps in a thread beside the smoke run): tracked, so that `vdk` stopped by SIGINT, SIGTERM or SIGHUP
ends them before it exits (cli/interrupts.py) instead of leaving them to finish on their own.
Standard library only."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

STOP_GRACE_SECONDS = 2

_running: set[subprocess.Popen] = set()
_lock = threading.Lock()


def run(
    argv: Sequence[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    on_stderr_line: Callable[[str], None] | None = None,
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True), the process tracked while it runs; raises
    subprocess.TimeoutExpired after `timeout` seconds, the process killed. `on_stderr_line(line)` is told each
    line of its stderr as it comes (what a helper says of its progress); the result still holds all of it."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    with _lock:
        _running.add(proc)
    try:
        try:
            if on_stderr_line is None:
                stdout, stderr = proc.communicate(timeout=timeout)
            else:
                stdout, stderr = _streamed(proc, on_stderr_line, timeout)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    finally:
        with _lock:
            _running.discard(proc)


def _streamed(proc: subprocess.Popen, on_line: Callable[[str], None], timeout: float | None) -> tuple[str, str]:
    """(stdout, stderr) of `proc`, its stderr told line by line as it comes; TimeoutExpired after `timeout`."""
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: out.append(stdout.read()), daemon=True)
    reader.start()
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, expire) if timeout is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    err: list[str] = []
    try:
        for line in proc.stderr:
            err.append(line)
            on_line(line.rstrip("\n"))
        proc.wait()
        reader.join()
    finally:
        if timer is not None:
            timer.cancel()
    if expired.is_set():
        raise subprocess.TimeoutExpired(proc.args, timeout or 0, "".join(out), "".join(err))
    return "".join(out), "".join(err)


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
