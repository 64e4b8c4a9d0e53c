"""No pre-flight wait is silent: while checks still run after the smoke run, a line says which, every few
seconds."""

import time

from vdk.plugin.ml_training.ops.deploy_checks import _wait_saying
from vdk.plugin.ml_training.ops.remote_checks import RemoteChecks


def test_the_checks_still_running_are_named_while_they_are_waited_for():
    checks = RemoteChecks({"dependencies": lambda: time.sleep(0.6), "registry": lambda: None}).start()
    said: list[str] = []
    _wait_saying(checks, said.append, every=0.2)
    assert said and all(line.startswith("Pre-flight: waiting for the dependencies check (") for line in said)
    assert checks.pending() == []


def test_checks_that_are_done_are_not_waited_for_aloud():
    checks = RemoteChecks({"registry": lambda: None}).start()
    checks.first_failure()
    said: list[str] = []
    _wait_saying(checks, said.append, every=0.2)
    assert said == []
