"""No pre-flight wait is silent: while checks still run after the smoke run, a line says which, every few
seconds; the first check to fail ends the wait, and what the others find within a short grace is said with it."""

import threading
import time

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops import deploy_checks
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


def test_problems_found_within_the_grace_are_said_together_in_the_checks_order():
    def fails_at_once():
        raise MLTrainingError("the base image's registry does not resolve", "use a mirror")

    def fails_soon():
        time.sleep(0.3)
        raise MLTrainingError("train.py:1: `import yaml` needs PyYAML", "add PyYAML to requirements.txt")

    hangs = threading.Event()
    checks = RemoteChecks({"imports": fails_soon, "base image": fails_at_once, "cluster": lambda: hangs.wait(30)})
    checks.start()
    assert checks.first_failure() is not None
    started = time.monotonic()
    error = deploy_checks.failed_checks(checks)
    hangs.set()
    assert time.monotonic() - started < deploy_checks.FAILURE_GRACE_SECONDS + 5  # the hung check is not waited out
    assert error.problem.startswith("the pre-flight found 2 problems:\n1. train.py:1: `import yaml` needs PyYAML\n")
    assert "2. the base image's registry does not resolve" in error.problem
    assert error.fix == "1. add PyYAML to requirements.txt\n2. use a mirror"
    assert error.problem.endswith("Nothing was built or deployed.")


def test_the_import_check_is_said_with_a_remote_failure_however_long_it_takes_on_a_loaded_machine(monkeypatch):
    monkeypatch.setattr(deploy_checks, "FAILURE_GRACE_SECONDS", 0.01)  # a machine so loaded the grace is over
    registry_failed = threading.Event()

    def push_refused():
        registry_failed.set()
        raise MLTrainingError("the registry 127.0.0.1:9 refuses connections", "start it")

    def imports_late():
        registry_failed.wait(5)
        time.sleep(0.3)
        raise MLTrainingError("train.py:1: `import yaml` needs PyYAML", "add PyYAML to requirements.txt")

    checks = RemoteChecks({"registry": push_refused, "imports": imports_late}).start()
    assert checks.first_failure() is not None
    error = deploy_checks.failed_checks(checks)
    assert "`import yaml` needs PyYAML" in error.problem and "refuses connections" in error.problem


def test_one_problem_found_twice_is_said_once():
    def fails():
        raise MLTrainingError("the base image's registry does not resolve", "use a mirror")

    checks = RemoteChecks({"base image": fails, "imports": fails}).start()
    checks.first_failure()
    error = deploy_checks.failed_checks(checks)
    said = "the base image's registry does not resolve\nNothing was built or deployed.\nFix: use a mirror"
    assert error.message == said


def test_the_overlays_activity_is_closed_however_the_interrupted_smoke_run_ended(monkeypatch):
    """A failed check's signal may raise anywhere in the smoke run, also between the overlay activity's making and
    the `try` that closes it: the activity is made and closed around the block where it may, so no heartbeat
    goes on saying "still working" after the deploy ended (it printed into later tests' stderr)."""
    import types

    from vdk.plugin.ml_training.ops.remote_checks import RemoteCheckFailed

    made = []
    real = deploy_checks.overlay_activity
    monkeypatch.setattr(deploy_checks, "overlay_activity", lambda reporter: made.append(real(reporter)) or made[-1])

    def interrupted(spec, again, reporter, files, activity):  # the signal's exception, before the smoke run's try
        raise RemoteCheckFailed("registry")

    monkeypatch.setattr(deploy_checks, "smoke_check", interrupted)

    def fails():
        raise MLTrainingError("the registry refused", "log in")

    checks = RemoteChecks({"registry": fails}).start()
    checks.first_failure()  # failed already: the block raises as it begins, after the activity was made
    reporter = types.SimpleNamespace(note=lambda text: None)
    spec = types.SimpleNamespace(sweep=None, job_dir="job")
    with pytest.raises(MLTrainingError, match="the registry refused"):
        deploy_checks._smoke_check(spec, checks, reporter, files=None)
    assert len(made) == 1 and made[0]._done.is_set()
