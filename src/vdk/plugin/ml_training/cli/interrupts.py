"""How `vdk` stops when asked to: Ctrl-C (SIGINT), SIGTERM (a CI timeout, `timeout 8 vdk run JOB`, kill)
and SIGHUP (a closed terminal) all end a local run or a deploy the same way: every process it started is
stopped (SIGTERM, then SIGKILL after a short grace), a line says so, and `vdk` exits with 128 + the
signal's number (130, 143, 129) without a traceback. A signal that `vdk` was started ignoring (`nohup`,
a shell's background job ignoring SIGINT) stays ignored. SIGKILL cannot be caught: the run's own
processes notice that `vdk` is gone (local/lifeline.py)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from vdk.plugin.ml_training import helper_processes

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RESEND_SECONDS = 0.05  # a signal whose Interrupted a finalizer dropped is sent again within this


class Interrupted(KeyboardInterrupt):
    """`vdk` was asked to stop by `signum`. A KeyboardInterrupt, so that what stops processes on Ctrl-C
    stops them on every such signal."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def as_interrupted(error: KeyboardInterrupt) -> Interrupted:
    return error if isinstance(error, Interrupted) else Interrupted(signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: the first of SIGINT, SIGTERM and SIGHUP raises Interrupted in the main thread; later ones
    are ignored while the run is being stopped (a second Ctrl-C must not cut the stopping short).

    Python runs a signal's handler wherever the main thread is, also inside a finalizer (an object's
    `__del__`, a closed generator, a weakref callback: the HTTP client's responses and pools have them).
    What a finalizer raises is printed and dropped, so an Interrupted raised there would never stop the
    run, and every later signal would be ignored: such a signal is sent again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    pending: list[int] = []  # a signal not taken yet: its Interrupted was dropped, or it came within the hook
    ended = threading.Event()

    def interrupt(signum, frame) -> None:
        if received:
            return
        if _within(frame, dropped.__code__):  # raised in the hook, it would be lost too: sent again
            pending.append(signum)
            return
        received.append(signum)
        pending.clear()
        raise Interrupted(signum)

    def resend() -> None:
        """Send a pending signal again to the main thread, until it was taken outside a finalizer and the hook."""
        main = threading.main_thread().ident
        assert main is not None
        while not ended.wait(RESEND_SECONDS):
            if pending and not received:
                signal.pthread_kill(main, pending[-1])

    unraisable_before = sys.unraisablehook

    def dropped(unraisable) -> None:
        error = unraisable.exc_value
        if isinstance(error, Interrupted) and received:
            received.clear()
            pending.append(error.signum)  # from another thread, a moment later: now, it would be dropped again
            return
        unraisable_before(unraisable)

    previous = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, interrupt)
    sys.unraisablehook = dropped
    threading.Thread(target=resend, name="vdk-ml-training-resend", daemon=True).start()
    try:
        yield
    finally:
        ended.set()
        sys.unraisablehook = unraisable_before
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _within(frame, code) -> bool:
    """Whether `frame` or a frame that called it runs `code`."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def exit_interrupted(error: KeyboardInterrupt, message: str | None = None) -> NoReturn:
    """End `vdk` as the signal asked: `message` on stderr, exit status 128 + its number, no traceback
    (vdk-core would print one, and a summary of a run that did not fail). The run's processes are
    stopped already."""
    interrupted = as_interrupted(error)
    helper_processes.stop_all()  # uv of a dependency check still resolving, say
    if message:
        print(message, file=sys.stderr)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(interrupted.exit_code)
