"""A lifeline from `vdk` to the processes of a local run, so that nothing outlives `vdk`, however it ends
(SIGKILL included: no handler of ours runs then).

`vdk` makes a pipe and keeps its only write end; the run's first process (torchrun's agent, or the guard
of a container run) gets the read end. The reader sees end-of-file when `vdk` closes it after the run,
or when `vdk` ends in any way: then the run is stopped from inside. Unlike the parent-death signal, this
works whatever thread started the process, and on macOS too. Standard library only: the agent imports it
before torch."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

# The read end's file descriptor number in the run's first process.
LIFELINE_FD = "VDK_ML_TRAINING_LIFELINE_FD"


class Lifeline:
    """The `vdk` side: the pipe, whose write end no child inherits (os.pipe's descriptors are not
    inheritable; the read end is passed explicitly with `pass_fds`)."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()

    def env(self) -> dict[str, str]:
        return {LIFELINE_FD: str(self.read_fd)}

    def started(self) -> None:
        """The child has its copy of the read end: ours would only keep the pipe from telling anything."""
        self._close_read()

    def cut(self) -> None:
        """The run is over (or must stop): its processes see end-of-file."""
        self._close_read()
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def _close_read(self) -> None:
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1


def watch(on_cut: Callable[[], None], environ: dict[str, str] | None = None) -> threading.Thread | None:
    """In the run's first process: call `on_cut` (in a daemon thread) once `vdk`'s end of the lifeline
    is closed. None when this process was started without one."""
    value = (os.environ if environ is None else environ).get(LIFELINE_FD)
    if not value:
        return None
    fd = int(value)

    def wait() -> None:
        try:
            while os.read(fd, 64):
                pass  # nothing is ever written: only end-of-file matters
        except OSError:
            pass
        on_cut()

    thread = threading.Thread(target=wait, name="vdk-ml-lifeline", daemon=True)
    thread.start()
    return thread
