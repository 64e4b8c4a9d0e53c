"""Which failures of an API request are tried again, how long between attempts, and the bound on all of them."""

from __future__ import annotations

import random

import pytest

from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import RESET
from vdk.plugin.ml_training.k8s.api_errors import TIMED_OUT
from vdk.plugin.ml_training.k8s.api_errors import UNREACHABLE
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.retries import Attempts
from vdk.plugin.ml_training.k8s.retries import RetryPolicy


def error(status: int, reason: str = "", retry_after: float | None = None) -> KubeApiError:
    e = KubeApiError(f"the server failed: {status}", "retry in a moment", status, reason)
    e.detail = "etcdserver: request timed out"
    e.retry_after = retry_after
    return e


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    "status, reason, worth",
    [
        (429, "TooManyRequests", True),
        (500, "InternalError", True),
        (502, "", True),
        (503, "ServiceUnavailable", True),
        (504, "", True),
        (0, RESET, True),
        (0, TIMED_OUT, True),
        (0, UNREACHABLE, False),  # refused, DNS, TLS: the same error would come back
        (501, "", False),
        (400, "BadRequest", False),
        (401, "Unauthorized", False),
        (403, "Forbidden", False),
        (404, "NotFound", False),
        (409, "AlreadyExists", False),
        (422, "Invalid", False),
    ],
)
def test_what_is_worth_another_attempt(status, reason, worth):
    assert retries.retryable(error(status, reason)) is worth


def test_waits_are_jittered_exponential_and_capped():
    policy = RetryPolicy(attempts=10, base_seconds=0.5, max_wait_seconds=4)
    rng = random.Random(7)
    for retry, ceiling in [(1, 0.5), (2, 1), (3, 2), (4, 4), (5, 4), (9, 4)]:
        waits = [policy.wait(retry, None, rng) for _ in range(200)]
        assert all(0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8 and min(waits) < ceiling * 0.2  # spread over the whole range


def test_retry_after_is_honoured_and_spread_a_little():
    policy = RetryPolicy(base_seconds=0.5)
    waits = [policy.wait(1, 3, random.Random(i)) for i in range(50)]
    assert all(3 <= w <= 3 + 0.5 / 4 for w in waits) and len(set(waits)) > 1


def test_attempts_are_bounded_in_number_and_said_one_line_each():
    clock, lines = Clock(), []
    attempts = Attempts(
        RetryPolicy(attempts=3, base_seconds=0.1), "list pods in namespace ml", lines.append, clock, clock.sleep
    )
    failure = error(503, "ServiceUnavailable")
    for _ in range(2):
        wait = attempts.next_wait(failure)
        assert wait is not None
        attempts.retry_after(failure, wait)
    assert attempts.next_wait(failure) is None
    assert len(lines) == 2 and len(clock.slept) == 2
    assert [f"{w:.1f}" for w in clock.slept] == [line.split("trying again in ")[1].split(" s ")[0] for line in lines]
    assert lines[0].startswith(
        "note: the Kubernetes API server answered 503 ServiceUnavailable to list pods in namespace ml; trying again in "
    )
    assert lines[0].endswith("(attempt 2 of at most 3)") and lines[1].endswith("(attempt 3 of at most 3)")
    final = attempts.exhausted(failure)
    assert final.problem.startswith("the server failed: 503 (tried 3 times in ")
    assert final.detail.startswith("etcdserver: request timed out (tried 3 times in ") and final.status == 503


def test_attempts_are_bounded_in_time():
    clock = Clock()
    attempts = Attempts(
        RetryPolicy(attempts=100, base_seconds=10, max_wait_seconds=10, budget_seconds=30),
        "x",
        print,
        clock,
        clock.sleep,
    )
    failure = error(500)
    made = 1
    while (wait := attempts.next_wait(failure)) is not None:
        attempts.retry_after(failure, wait)
        made += 1
    assert clock.now <= 30 and made < 100
    # a server that asks for longer than what is left is not waited for
    clock = Clock()
    attempts = Attempts(RetryPolicy(budget_seconds=30), "x", print, clock, clock.sleep)
    assert attempts.next_wait(error(429, "TooManyRequests", retry_after=60)) is None


def test_a_429_that_persists_says_to_come_back_later():
    clock = Clock()
    attempts = Attempts(
        RetryPolicy(attempts=2, base_seconds=0.01),
        "list jobs.batch in namespace ml",
        lambda _: None,
        clock,
        clock.sleep,
    )
    busy = error(429, "TooManyRequests", retry_after=1)
    attempts.retry_after(busy, attempts.next_wait(busy))
    final = attempts.exhausted(busy)
    assert "(tried 2 times in 1 s)" in final.problem
    assert "run the command again in a few minutes" in final.fix and "API Priority and Fairness" in final.fix


def test_call_sends_again_until_it_succeeds_and_not_after_a_refusal():
    clock, lines = Clock(), []
    answers = [error(500), error(0, RESET), "ok"]

    def request():
        answer = answers.pop(0)
        if isinstance(answer, KubeApiError):
            raise answer
        return answer

    assert retries.call(request, RetryPolicy(base_seconds=0.01), "get Pod p", lines.append, clock.sleep) == "ok"
    assert len(lines) == 2 and "closed the connection without an answer to get Pod p" in lines[1]
    refused = error(403, "Forbidden")
    calls = []

    def forbidden():
        calls.append(1)
        raise refused

    with pytest.raises(KubeApiError) as e:
        retries.call(forbidden, RetryPolicy(), "list pods", lines.append, clock.sleep)
    assert e.value is refused and len(calls) == 1 and len(lines) == 2
