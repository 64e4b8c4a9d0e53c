"""A push's parallel uploads (image/build.py) end at once at the first failure or signal: the other uploads are
not waited for, and the registry clients start no request and try none again; the results come in order."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from vdk.plugin.ml_training.image import build
from vdk.plugin.ml_training.image.registry import RegistryClient


def test_the_results_come_in_the_tasks_order():
    with RegistryClient("127.0.0.1:5000") as client:
        assert build._in_parallel([lambda i=i: i for i in range(7)], (client,)) == list(range(7))


@pytest.mark.parametrize("stop", ["a signal", "a failure"])
def test_the_first_failure_or_a_signal_ends_the_push_without_waiting_for_the_others(stop):
    release = threading.Event()

    def slow():
        release.wait(30)  # an upload that stalls
        return "late"

    def failing():
        time.sleep(0.2)
        raise RuntimeError("the registry refused it")

    def interrupt(signum, frame):
        raise KeyboardInterrupt  # what cli/interrupts.py raises in the main thread on SIGINT, SIGTERM, SIGHUP

    tasks = [slow, failing] if stop == "a failure" else [slow, slow]
    expected = RuntimeError if stop == "a failure" else KeyboardInterrupt
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with RegistryClient("127.0.0.1:5000") as pusher, RegistryClient("127.0.0.1:5001") as puller:
            started = time.monotonic()
            if stop == "a signal":
                signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(expected):
                build._in_parallel(tasks, (pusher, puller))
            took = time.monotonic() - started
            release.set()
            assert took < 5  # the stalled uploads were not waited for
            for client in (pusher, puller):
                with pytest.raises(build.RegistryError) as e:
                    client.send("team/job", "read manifest team/job:1", "get", "manifests/1")
                assert "were stopped before: read manifest team/job:1" in e.value.problem  # no request starts
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
