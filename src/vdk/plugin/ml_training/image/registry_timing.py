"""How long the builder waits for a registry, how often it tries again, and what it says while it waits.

A registry that accepts connections and never answers must not hold a deploy for long, nor in silence:

- every request has a connect timeout and an answer timeout (the silence allowed while waiting for the
  answer, or between two chunks of a blob), sized to the operation: an upload's answer may come later
  than a manifest's, by the time a registry takes to commit that many bytes;
- a request is tried again after a failure that may pass (5xx, 429, a dropped connection) with jittered
  backoff, at most `attempts` times and never after `operation_seconds`; a request the registry did not
  answer at all is tried `timeout_attempts` times (each such attempt already cost a whole answer timeout);
- a name that does not resolve is not tried again: a DNS answer does not change in seconds;
- a push as a whole has a deadline (`push_seconds`, from the bytes it moves): no request starts after it;
- a wait longer than `notice_after` seconds is said, then every `notice_every` seconds (`Waits`).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from vdk.plugin.ml_training.errors import MLTrainingError

_COMMIT_BYTES_PER_SECOND = 20e6  # the slowest a registry is expected to commit an uploaded blob
# The answer timeout in seconds, for registries (or proxies) slower than the default allows.
ANSWER_TIMEOUT_ENV = "VDK_ML_TRAINING_REGISTRY_TIMEOUT"


@dataclass(frozen=True)
class RetryPolicy:
    """Timeouts and retries of registry requests (seconds). Tests pass short ones."""

    attempts: int = 5
    first_delay: float = 0.5
    max_delay: float = 8.0
    connect_seconds: float = 10.0
    answer_seconds: float = 30.0
    timeout_attempts: int = 2
    operation_seconds: float = 300.0
    notice_after: float = 2.0
    notice_every: float = 10.0
    push_floor_seconds: float = 15 * 60
    push_bytes_per_second: float = 1e6  # the slowest link a push is expected to have

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RetryPolicy:
        """The defaults, with the answer timeout of $VDK_ML_TRAINING_REGISTRY_TIMEOUT (seconds) when set."""
        text = (os.environ if environ is None else environ).get(ANSWER_TIMEOUT_ENV, "").strip()
        if not text:
            return cls()
        try:
            answer = float(text)
        except ValueError:
            answer = -1.0
        if not 0 < answer <= 3600:
            raise MLTrainingError(
                f"{ANSWER_TIMEOUT_ENV} is {text!r}, not a number of seconds from 1 to 3600",
                f"set {ANSWER_TIMEOUT_ENV}=120 (how long to wait for a registry's answer), or unset it for 30",
            )
        return cls(answer_seconds=answer, operation_seconds=max(300.0, answer * 4))

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.first_delay * (2**attempt))
        return base * (0.5 + random.random() / 2)  # jitter: parallel clients do not retry in step

    def answer_timeout(self, upload_bytes: int = 0) -> float:
        """The silence allowed before a request counts as not answered: longer after a big upload, which
        the registry checks and stores before it answers."""
        return self.answer_seconds + upload_bytes / _COMMIT_BYTES_PER_SECOND

    def timeouts(self, upload_bytes: int = 0) -> tuple[float, float]:
        """(connect, read) for requests."""
        return (self.connect_seconds, self.answer_timeout(upload_bytes))

    def push_seconds(self, total_bytes: int) -> float:
        """The deadline of a push of `total_bytes` (15 minutes, and a second per MB on top)."""
        return self.push_floor_seconds + total_bytes / self.push_bytes_per_second


def unresolved_name(error: BaseException) -> BaseException | None:
    """The DNS failure (socket.gaierror, urllib3's NameResolutionError) behind a connection error, if any."""
    seen: set[int] = set()
    stack: list[object] = [error]
    while stack:
        item = stack.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, socket.gaierror) or type(item).__name__ == "NameResolutionError":
            return item
        stack += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    text = str(error)
    if "Failed to resolve" in text or "Name or service not known" in text or "nodename nor servname" in text:
        return error
    return None


def timed_out(error: BaseException) -> bool:
    """Whether a request failed because the registry did not answer in time (requests reports a read timeout
    in the middle of a body as a ConnectionError)."""
    import requests

    return isinstance(error, requests.Timeout) or "timed out" in str(error).lower()


def seconds(value: float) -> str:
    """`45 s`, `2 min 5 s`."""
    value = round(value)
    if value < 120:
        return f"{value} s"
    minutes, rest = divmod(value, 60)
    return f"{minutes} min" + (f" {rest} s" if rest else "")


@dataclass
class _Wait:
    what: str
    limit: float
    since: float  # the last sign of life: the request sent, a chunk moved
    said: float = 0.0  # when it was last said


class Waits:
    """The requests of one client that wait for the registry; a wait that lasts is said through `say`, by one
    thread that looks twice a second while anything waits (`ticking`; else the caller calls `tick`)."""

    def __init__(
        self,
        registry: str,
        policy: RetryPolicy,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        ticking: bool = True,
    ):
        self.registry, self.policy, self.say, self.clock = registry, policy, say, clock
        self._waits: dict[int, _Wait] = {}
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None if ticking else threading.current_thread()
        self._stop = threading.Event()

    @contextmanager
    def waiting(self, what: str, limit: float) -> Iterator[Callable[[int], None]]:
        """Within: a request that waits for the registry at most `limit` seconds of silence; call the yielded
        function when bytes move (they are a sign of life)."""
        key = id(threading.current_thread())
        wait = _Wait(what, limit, self.clock())

        def alive(_: int = 0) -> None:
            wait.since = self.clock()

        with self._lock:
            self._waits[key] = wait
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._run, name="vdk-ml-registry-waits", daemon=True)
                self._ticker.start()
        try:
            yield alive
        finally:
            with self._lock:
                self._waits.pop(key, None)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.tick()

    def tick(self) -> None:
        """Say every wait that has been silent for `notice_after` seconds and not said for `notice_every`."""
        now = self.clock()
        with self._lock:
            due = []
            for wait in self._waits.values():
                silent = now - wait.since
                if silent >= self.policy.notice_after and (
                    not wait.said or now - wait.said >= self.policy.notice_every
                ):
                    wait.said = now
                    due.append((wait.what, silent, wait.limit))
        for what, silent, limit in due:
            self.say(
                f"  waiting for {self.registry} to answer ({what}): no answer for {seconds(silent)}, "
                f"giving up after {seconds(limit)}"
            )
