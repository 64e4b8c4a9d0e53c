"""The stall watchdog without a process: on a clock driven by hand, a rank with no optimizer step for
stall_timeout (its first for startup_timeout) is stalled, a timeout of 0 turns that part off, the
settings come from the environment, the thread looks often enough; the stall line and every thread's
stack are read back as written, left once as the termination message, and firing exits with the stall
code. (In real training processes: tests/integration/runtime/test_watchdog_ranks.py.)"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime import virtual_gpu
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import Watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings
from vdk.plugin.ml_training.runtime.watchdog import parse_stall


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watched(stall: float, startup: float, steps: list[int], clock: Clock) -> Watchdog:
    return Watchdog(WatchdogSettings(stall, startup), "3", lambda: steps[0], clock=clock)


# --- when a rank is stalled ---------------------------------------------------------------------------


def test_no_step_for_the_timeout_is_a_stall_and_the_first_step_gets_the_startup_timeout():
    clock, steps = Clock(), [0]
    dog = watched(stall=60, startup=600, steps=steps, clock=clock)
    clock.now += 599
    assert dog.check() is None  # loading data and compiling: the startup timeout applies
    clock.now += 1
    first = dog.check()
    assert (first.rank, first.last_step, first.seconds) == ("3", None, 600)
    assert first.describe() == "no optimizer step for 10m on rank 3 (no step yet, startup_timeout)"

    clock.now += 5
    steps[0] = 1  # a step resets the clock, and from now on the stall timeout applies
    assert dog.check() is None
    for _ in range(59):
        clock.now += 1
        assert dog.check() is None
    clock.now += 1
    stall = dog.check()
    assert (stall.last_step, stall.seconds, stall.collective) == (1, 60, None)
    assert stall.line() == "[vdk-ml-training] stalled: no optimizer step for 1m on rank 3 (last step 1)"


def test_a_timeout_of_0_turns_that_part_off():
    clock, steps = Clock(), [0]
    no_startup = watched(stall=60, startup=0, steps=steps, clock=clock)
    clock.now += 10 * 86400
    assert no_startup.check() is None  # no limit before the first step
    steps[0] = 4
    assert no_startup.check() is None
    clock.now += 61
    assert no_startup.check().last_step == 4
    assert not WatchdogSettings(0, 0).on and watchdog.start("0", lambda: 0) is None


def test_settings_come_from_the_environment_and_bad_values_are_named():
    env = {watchdog.STALL_TIMEOUT: "1800", watchdog.STARTUP_TIMEOUT: "0.5"}
    assert WatchdogSettings.from_env(env) == WatchdogSettings(1800, 0.5)
    assert WatchdogSettings.from_env({}) == WatchdogSettings(0, 0)  # a run rendered without them: no watchdog
    bad = WatchdogSettings.from_env({watchdog.STALL_TIMEOUT: "30m", watchdog.STARTUP_TIMEOUT: "-1"})
    assert (bad.stall_seconds, bad.startup_seconds) == (0, 0)
    assert [p.split("=")[0] for p in bad.problems] == [watchdog.STALL_TIMEOUT, watchdog.STARTUP_TIMEOUT]
    assert WatchdogSettings(1800, 3600).env() == {watchdog.STALL_TIMEOUT: "1800", watchdog.STARTUP_TIMEOUT: "3600"}


def test_the_thread_looks_often_enough_and_a_rank_in_a_collective_waits_a_little_longer():
    assert watchdog.poll_interval(WatchdogSettings(1800, 3600)) == 10  # at most every 10 s
    assert watchdog.poll_interval(WatchdogSettings(3, 0)) == pytest.approx(0.1)  # 30 times per timeout
    assert watchdog.collective_grace(1800, 10) == 180
    assert watchdog.collective_grace(3, 0.1) == pytest.approx(0.3)
    assert watchdog.collective_grace(86400, 10) == 300


# --- what it prints, and reading it back --------------------------------------------------------------


def test_the_stall_and_its_stacks_are_read_back_from_a_log_where_other_ranks_write_too():
    stall = Stall(
        "5",
        1834.2,
        1234,
        "all_reduce",
        [
            ("MainThread", ['  File "/opt/vdk-ml/job/train.py", line 42, in train', "    dist.all_reduce(grad)"]),
            ("pin_memory", ['  File "/usr/lib/python3.11/threading.py", line 327, in wait', "    waiter.acquire()"]),
        ],
    )
    lines = stall.lines()
    assert lines[0] == "[vdk-ml-training] stalled: no optimizer step for 30m on rank 5 (last step 1234) in all_reduce"
    log = ["epoch 3", *lines[:2], "[vdk-ml-training] stack rank=6   File 'other.py', line 1, in f", *lines[2:], "x"]
    read = parse_stall([f"2026-01-02T03:04:05Z {line}" for line in log])  # timestamps as `kubectl logs` adds
    assert (read.rank, read.seconds, read.last_step, read.collective) == ("5", 1800, 1234, "all_reduce")
    assert read.threads == stall.threads
    assert read.describe() == (
        "no optimizer step for 30m on rank 5 (last step 1234), waiting in the collective all_reduce"
    )
    assert read.top_frames(1) == stall.threads[0][1]
    assert parse_stall(["nothing here"]) is None
    assert parse_stall([Stall("0", 3600, None).line()]).last_step is None


def test_a_stall_is_left_once_as_the_termination_message_and_never_creates_the_file(tmp_path):
    message = tmp_path / "termination-log"
    message.write_text("")  # the kubelet's empty file
    assert termination.leave("first", str(message)) and not termination.leave("second", str(message))
    assert message.read_text() == "first\n"
    assert not termination.leave("x", str(tmp_path / "absent")) and not (tmp_path / "absent").exists()
    message.write_text("")
    termination.leave("y" * 10_000, str(message))
    assert len(message.read_bytes()) == termination.MAX_BYTES


def test_firing_records_prints_leaves_the_message_and_exits_with_the_stall_code(tmp_path, monkeypatch):
    message = tmp_path / "termination-log"
    message.write_text("")
    monkeypatch.setattr(termination, "PATH", str(message))
    clock, out, seen, codes = Clock(), io.StringIO(), [], []
    dog = Watchdog(WatchdogSettings(5, 5), "1", lambda: 2, seen.append, clock, out, codes.append)
    dog.check()  # the step count is 2 from here on
    clock.now += 5
    dog.fire(dog.check())
    assert codes == [STALL_EXIT_CODE] and [s.last_step for s in seen] == [2]
    printed = out.getvalue().splitlines()
    assert printed[0] == "[vdk-ml-training] stalled: no optimizer step for 5s on rank 1 (last step 2)"
    assert "[vdk-ml-training] stack rank=1 thread=MainThread (most recent call first)" in printed
    assert any("test_watchdog.py" in line for line in printed)  # where the main thread was: this test
    left = parse_stall(message.read_text().splitlines())
    assert left.rank == "1" and [name for name, _ in left.threads] == ["MainThread"]


def test_a_thread_s_stack_leaves_out_the_frames_of_the_runtime_s_sub_packages():
    stand_in = str(Path(virtual_gpu.__file__).parent / "stand_in.py")  # a stand-in's file of the virtual GPUs
    namespace: dict = {"take": watchdog.thread_stacks}
    exec(compile("def synchronize():\n    return take()\n", stand_in, "exec"), namespace)
    stacks = dict(namespace["synchronize"]())
    text = "\n".join(stacks[threading.current_thread().name])
    assert stand_in not in text and f'File "{__file__}"' in text
