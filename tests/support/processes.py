"""Which processes of a run are still alive, read from the process table (/proc): every process started
with `VDK_TEST_RUN_MARK=<mark>` in its environment (a job's `[ml-training.env]` reaches torchrun's
agent, every rank and the DataLoader workers they fork, on this machine and in a container)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

MARK = "VDK_TEST_RUN_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


def marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment has MARK=mark."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def left_after(mark: str, seconds: float) -> list[int]:
    """The marked processes still alive after waiting up to `seconds` for them to go."""
    deadline = time.monotonic() + seconds
    while True:
        alive = marked(mark)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def wait_for_files(directory: Path, pattern: str, count: int, seconds: float, proc: Any = None) -> bool:
    """Whether `count` files matching `pattern` appeared in time (False at once when `proc` ended)."""
    deadline = time.monotonic() + seconds
    while len(list(directory.glob(pattern))) < count:
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            return False
        time.sleep(0.1)
    return True


def with_stack_dumps(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this one's) for a Python process that writes every thread's stack to stderr when it is
    ended with SIGABRT (faulthandler): so a test can show where a process it waited for in vain was."""
    return {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}


def wait_or_abort(proc: subprocess.Popen, seconds: float) -> None:
    """Wait for `proc` up to `seconds`; if it is still running, end it with SIGABRT (its stacks on its stderr
    when started with `with_stack_dumps`); its exit status then says it was aborted."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
