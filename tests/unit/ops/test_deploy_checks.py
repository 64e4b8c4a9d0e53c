"""No pre-flight wait is silent: while checks still run after the smoke run, a line says which, every few
seconds; and the first check to fail ends the wait."""

import threading
import time

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.remote_checks import RemoteChecks


def test_the_checks_still_running_are_named_while_they_are_waited_for():
    checks = RemoteChecks({"dependencies": lambda: time.sleep(0.6), "registry": lambda: None}).start()
    said: list[str] = []
    assert checks.first_failure(said.append, after=0.1, every=0.2) is None
    assert said and all(line.startswith("Pre-flight: waiting for the dependencies check (") for line in said)
    assert checks.pending() == []


def test_checks_that_are_done_are_not_waited_for_aloud():
    checks = RemoteChecks({"registry": lambda: None}).start()
    checks.first_failure()
    said: list[str] = []
    checks.first_failure(said.append, after=0.0, every=0.2)
    assert said == []


def test_the_first_failure_ends_the_wait_for_the_others():
    def fails():
        raise MLTrainingError("the registry refused", "log in")

    slow = threading.Event()
    checks = RemoteChecks({"dependencies": lambda: slow.wait(30), "registry": fails}).start()
    started = time.monotonic()
    failure = checks.first_failure(lambda line: None)
    slow.set()
    assert failure is not None and failure[0] == "registry" and "refused" in str(failure[1])
    assert time.monotonic() - started < 10
