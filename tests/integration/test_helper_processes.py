import subprocess
import sys
import threading
import time

import pytest

from vdk.plugin.ml_training import helper_processes

SLEEPER = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(120)"]


def test_a_helper_process_runs_as_subprocess_run_would():
    done = helper_processes.run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert not helper_processes._running


def test_a_helper_process_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        helper_processes.run(SLEEPER, timeout=1)
    assert not helper_processes._running


def test_stop_all_ends_a_helper_process_another_thread_waits_for():
    results: list[subprocess.CompletedProcess] = []
    thread = threading.Thread(target=lambda: results.append(helper_processes.run(SLEEPER)))
    thread.start()
    deadline = time.monotonic() + 30
    while not helper_processes._running and time.monotonic() < deadline:
        time.sleep(0.05)
    (proc,) = helper_processes._running
    helper_processes.stop_all()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results[0].returncode < 0 and proc.poll() is not None  # ended by SIGTERM, not after its 120 s
    assert not helper_processes._running
