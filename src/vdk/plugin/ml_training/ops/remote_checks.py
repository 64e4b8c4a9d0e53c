"""What `vdk deploy` checks remotely, at once and while its smoke run runs: a problem of the cluster, the
registry, the base image or the dependencies is reported in seconds, not after a smoke run of minutes.

Each check runs in a thread of its own. The first to fail stops the smoke run (the main thread is
interrupted as by a signal, so every process of the run is stopped) and is reported with its fix; when all
pass, the smoke run's result decides. Nothing is pushed and nothing is created by a check."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # the builtin's alias from Python 3.11
from contextlib import contextmanager
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError

# A wait for the checks longer than this is said, then again every NOTICE_EVERY seconds.
NOTICE_AFTER = 2.0
NOTICE_EVERY = 10.0
# The signal that interrupts the main thread's smoke run when a check fails (vdk uses it for nothing else).
_INTERRUPT = signal.SIGUSR1


class RemoteCheckFailed(BaseException):
    """Raised in the main thread, in the middle of the smoke run, when a remote check failed. Not an
    Exception: nothing on the way may swallow it, and what stops processes on Ctrl-C stops them here."""

    def __init__(self, check: str):
        super().__init__(check)
        self.check = check


class RemoteChecks:
    """Named checks, started at once in threads; `result(name)` waits for one, `first_failure()` for all."""

    def __init__(self, checks: dict[str, Callable[[], Any]]):
        self._checks = checks
        self._futures: dict[str, Future] = {name: Future() for name in checks}
        self._failures: list[tuple[str, MLTrainingError]] = []  # in the order they happened
        self._lock = threading.RLock()  # the interrupting handler runs in the main thread, which may hold it
        self._interrupt_thread: int | None = None  # the thread to interrupt on a failure, while one waits
        self.seconds: dict[str, float] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._checks)

    def start(self) -> RemoteChecks:
        for name, check in self._checks.items():
            threading.Thread(target=self._run, args=(name, check), name=f"vdk-ml-check-{name}", daemon=True).start()
        return self

    def _run(self, name: str, check: Callable[[], Any]) -> None:
        started = time.monotonic()
        future = self._futures[name]
        try:
            future.set_result(check())
        except MLTrainingError as e:
            self._failed(name, e)
            future.set_exception(e)
        except Exception as e:  # noqa: BLE001 - a bug in a check is reported as that check's failure
            error = MLTrainingError(f"the {name} check failed unexpectedly: {type(e).__name__}: {e}", "deploy again")
            self._failed(name, error)
            future.set_exception(error)
        finally:
            self.seconds[name] = time.monotonic() - started

    def _failed(self, name: str, error: MLTrainingError) -> None:
        with self._lock:
            self._failures.append((name, error))
            if len(self._failures) == 1 and self._interrupt_thread is not None:
                signal.pthread_kill(self._interrupt_thread, _INTERRUPT)

    def result(self, name: str) -> Any:
        """What check `name` found (waiting for it); its MLTrainingError if it failed."""
        return self._futures[name].result()

    def first_failure(
        self, say: Callable[[str], None] | None = None, after: float = NOTICE_AFTER, every: float = NOTICE_EVERY
    ) -> tuple[str, MLTrainingError] | None:
        """Waits for every check, or until one fails (a wait of more than `after` seconds said through `say`,
        then every `every` seconds, naming the checks still running); the one that failed first, if any."""
        started = time.monotonic()
        said: float | None = None
        while True:
            with self._lock:
                if self._failures:
                    break
            running = [name for name, future in self._futures.items() if not future.done()]
            if not running:
                break
            waited = time.monotonic() - started
            due = said is None or waited - said >= every
            if say is not None and waited >= after and due:
                said = waited
                say(
                    f"Pre-flight: waiting for the {', '.join(running)} check{'s' * (len(running) > 1)} ({waited:.0f} s)"
                )
            try:
                self._futures[running[0]].exception(timeout=0.25)
            except FutureTimeout:
                pass
        with self._lock:
            return self._failures[0] if self._failures else None

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for every check to end; whether they all have."""
        deadline = time.monotonic() + timeout
        for future in self._futures.values():
            left = deadline - time.monotonic()
            if left <= 0 and not future.done():
                return False
            try:
                future.exception(timeout=max(left, 0))
            except FutureTimeout:
                return False
        return True

    def wait_for(self, name: str, timeout: float) -> bool:
        """Wait up to `timeout` seconds for check `name` to end (absent: nothing to wait for); whether it has."""
        future = self._futures.get(name)
        if future is None:
            return True
        try:
            future.exception(timeout=timeout)
        except FutureTimeout:
            return False
        return True

    def pending(self) -> list[str]:
        """The checks still running."""
        return [name for name, future in self._futures.items() if not future.done()]

    def failure_so_far(self) -> tuple[str, MLTrainingError] | None:
        with self._lock:
            return self._failures[0] if self._failures else None

    def failures(self, grace: float = 0.0) -> list[tuple[str, MLTrainingError]]:
        """Every failure, in the checks' order, after up to `grace` seconds for those still running: checks
        that end within it (a local check beside a remote one that failed at once) are said together, so
        which problem is shown does not depend on which thread was quicker."""
        self.wait(grace)
        with self._lock:
            failed = dict(self._failures)
        return [(name, failed[name]) for name in self._checks if name in failed]

    @contextmanager
    def interrupting(self) -> Iterator[None]:
        """Within: the first failure of a check raises RemoteCheckFailed here (main thread only; elsewhere
        the failure waits for the block to end). A check that failed already raises at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def interrupt(signum, frame) -> None:
            with self._lock:
                armed = self._interrupt_thread is not None
                failure = self._failures[0][0] if self._failures else None
            if armed and failure:
                raise RemoteCheckFailed(failure)

        previous = signal.signal(_INTERRUPT, interrupt)
        try:
            with self._lock:
                if self._failures:
                    raise RemoteCheckFailed(self._failures[0][0])
                self._interrupt_thread = threading.get_ident()
            yield
        finally:
            with self._lock:
                self._interrupt_thread = None
            signal.signal(_INTERRUPT, previous)
