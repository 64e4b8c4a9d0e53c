"""When a Kubernetes API request is sent again: which failures are worth another attempt, how long to wait
between attempts, and the bound on the whole.

Sent again: 429 (the server's API Priority and Fairness turned the request away: `Retry-After` says when to
come back), 500, 502, 503 and 504 (a busy or restarting API server, etcd timeouts, a load balancer between),
and a connection reset or a reply that did not come in time. Not sent again: a server that cannot be reached
at all (refused, DNS, TLS: the same error would come back after the user waited), and every other answer
(the request itself is wrong, or not allowed).

Only requests that may be sent twice are retried here: reads, deletes, dry runs and access reviews. A create
is retried by the client only after it looked the object up by its name (`KubeClient.create`): a create whose
reply was lost may have been done.

Waits are exponential with full jitter (many clients retrying at once do not come back at once), at least what
`Retry-After` asks; all attempts of one request fit in `budget_seconds`. Each retry is said in one line.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from vdk.plugin.ml_training.k8s.api_errors import RESET
from vdk.plugin.ml_training.k8s.api_errors import TIMED_OUT
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
TRANSIENT_REASONS = frozenset({RESET, TIMED_OUT})

Say = Callable[[str], None]


def to_stderr(text: str) -> None:
    """The default place of the retry lines: stderr (stdout holds a command's results)."""
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long one request is tried."""

    attempts: int = 6  # at most, the first one included
    base_seconds: float = 0.5  # the first wait is up to this, then doubling
    max_wait_seconds: float = 10.0  # no wait is longer (unless the server's Retry-After asks for more)
    budget_seconds: float = 45.0  # every attempt and wait of one request, from its first attempt

    def wait(self, retry: int, retry_after: float | None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (1 for the first): full jitter over the exponential
        backoff, and at least the server's `Retry-After`."""
        ceiling = min(self.max_wait_seconds, self.base_seconds * 2 ** (retry - 1))
        jittered = (rng or random).uniform(0, ceiling)
        if retry_after is not None:
            return max(float(retry_after), 0.0) + jittered / 4  # what the server asked, spread a little
        return jittered


DEFAULT_POLICY = RetryPolicy()
NO_RETRIES = RetryPolicy(attempts=1)


def retryable(error: KubeApiError) -> bool:
    """Whether sending the same request again may succeed: 429, 5xx (but 501), a reset or a timeout."""
    return error.status in RETRYABLE_STATUSES or (error.status == 0 and error.reason in TRANSIENT_REASONS)


def outcome(error: KubeApiError) -> str:
    """What the server did, in a few words: "answered 503 ServiceUnavailable", "reset the connection"."""
    if error.status == 0:
        return "did not answer in time" if error.reason == TIMED_OUT else "closed the connection without an answer"
    return f"answered {error.status}" + (f" {error.reason}" if error.reason else "")


class Attempts:
    """The attempts of one request under a policy: `next_wait(error)` says how long to wait before the next
    one, or None when the policy's attempts or time are used up; `exhausted(error)` is the error to raise."""

    def __init__(
        self,
        policy: RetryPolicy,
        what: str,
        say: Say,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.policy = policy
        self.what = what  # "list pods in namespace ml"
        self.say = say
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.made = 1  # the first attempt is under way

    def next_wait(self, error: KubeApiError) -> float | None:
        if not retryable(error) or self.made >= self.policy.attempts:
            return None
        wait = self.policy.wait(self.made, error.retry_after)
        if self.clock() - self.started + wait > self.policy.budget_seconds:
            return None
        return wait

    def retry_after(self, error: KubeApiError, wait: float, then: str = "trying again") -> None:
        """Say the retry in one line, wait, and count the next attempt."""
        asked = f" (Retry-After {error.retry_after:g} s)" if error.retry_after is not None else ""
        self.say(
            f"note: the Kubernetes API server {outcome(error)} to {self.what}{asked}; {then} in {wait:.1f} s "
            f"(attempt {self.made + 1} of at most {self.policy.attempts})"
        )
        self.sleep(wait)
        self.made += 1

    def exhausted(self, error: KubeApiError) -> KubeApiError:
        """`error` as the last word after retries: how often it was tried, and for how long."""
        if self.made == 1 or not retryable(error):
            return error
        seconds = self.clock() - self.started
        fix = error.fix
        if error.status == 429:
            fix = (
                "the API server is turning requests away (overloaded, or this user's share of it is used up): "
                "run the command again in a few minutes; a cluster admin can check its API Priority and Fairness"
            )
        tried = KubeApiError(
            f"{error.problem} (tried {self.made} times in {seconds:.0f} s)",
            fix,
            error.status,
            error.reason,
            error.not_served,
        )
        tried.detail = f"{error.detail} (tried {self.made} times in {seconds:.0f} s)" if error.detail else ""
        tried.retry_after = error.retry_after
        return tried


def call(
    request: Callable[[], object],
    policy: RetryPolicy,
    what: str,
    say: Say,
    sleep: Callable[[float], None] = time.sleep,
) -> object:
    """`request()`, sent again under `policy` while it fails in a way worth retrying (the request must be
    one that may be sent twice)."""
    attempts = Attempts(policy, what, say, sleep=sleep)
    while True:
        try:
            return request()
        except KubeApiError as error:
            wait = attempts.next_wait(error)
            if wait is None:
                raise attempts.exhausted(error) from None
            attempts.retry_after(error, wait)
