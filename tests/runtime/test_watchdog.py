"""The stall watchdog: a rank that completes no optimizer step for stall_timeout (its first for
startup_timeout) prints the stall line and every thread's stack, leaves them as its container's
termination message and exits with its own code, in job images and full local runs, also while it waits
in a gloo collective; a healthy slow run is never stopped; what it prints is read back as written."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import Watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings
from vdk.plugin.ml_training.runtime.watchdog import parse_stall

BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"


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


# --- in a job image (the bootstrap without the local launcher) ----------------------------------------

STOPS_STEPPING = """
import time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
print("waiting for data that never comes", flush=True)
time.sleep(120)
"""


def bootstrap(cwd: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    (cwd / "train.py").write_text(textwrap.dedent(script))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") and k != "RANK"}
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, "train.py"],
        cwd=cwd,
        env={**clean, "CUDA_VISIBLE_DEVICES": "", "RANK": "2", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_in_an_image_a_rank_that_stops_stepping_exits_with_the_stall_code_and_its_stack(tmp_path):
    started = time.monotonic()
    done = bootstrap(tmp_path, STOPS_STEPPING, {watchdog.STALL_TIMEOUT: "2", watchdog.STARTUP_TIMEOUT: "60"})
    assert done.returncode == STALL_EXIT_CODE, done.stderr
    assert time.monotonic() - started < 60
    assert "waiting for data that never comes" in done.stdout
    stall = parse_stall(done.stderr.splitlines())
    assert (stall.rank, stall.last_step, stall.collective) == ("2", 2, None)
    assert stall.describe().startswith("no optimizer step for 2s on rank 2 (last step 2)")
    frames = stall.top_frames()
    assert frames[0].endswith("in <module>") and "train.py" in frames[0] and frames[1].strip() == "time.sleep(120)"
    assert "bootstrap.py" not in done.stderr and "runpy" not in done.stderr  # what ran the code is left out

    never = bootstrap(tmp_path, "import time\nimport torch\ntime.sleep(120)\n", {watchdog.STARTUP_TIMEOUT: "1"})
    assert never.returncode == STALL_EXIT_CODE
    assert parse_stall(never.stderr.splitlines()).describe() == (
        "no optimizer step for 1s on rank 2 (no step yet, startup_timeout)"
    )


@pytest.mark.slow
def test_without_its_settings_or_once_the_script_ended_there_is_no_watchdog(tmp_path):
    off = bootstrap(tmp_path, "import time\nimport torch\ntime.sleep(2)\nprint('done')\n", {})
    assert off.returncode == 0 and off.stdout == "done\n"
    one_step = "w = torch.nn.Parameter(torch.ones(1))\nw.sum().backward()\ntorch.optim.SGD([w], lr=1).step()\n"
    ended = bootstrap(
        tmp_path,
        "import atexit, time\nimport torch\n" + one_step + "atexit.register(time.sleep, 3)\n",  # a slow teardown
        {watchdog.STALL_TIMEOUT: "1", watchdog.STARTUP_TIMEOUT: "60"},
    )
    assert ended.returncode == 0, ended.stderr


SPAWNS_SLOW_WORKERS = """
import time
import torch
import torch.multiprocessing as mp


def main(rank):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(12):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        time.sleep(2)
    print(f"worker {rank} done", flush=True)


if __name__ == "__main__":
    mp.spawn(main, nprocs=2)
"""


@pytest.mark.slow
def test_a_launcher_that_spawns_its_workers_hands_the_watch_over_to_them(tmp_path):
    # the launcher never steps and waits longer than its startup timeout (the workers train for 24 s): its
    # workers train and are watched. The timeout leaves a loaded machine time to start a worker (import torch).
    env = {"RANK": "0", watchdog.STALL_TIMEOUT: "8", watchdog.STARTUP_TIMEOUT: "20"}
    done = bootstrap(tmp_path, SPAWNS_SLOW_WORKERS, env)
    assert done.returncode == 0, done.stderr
    assert "worker 0 done" in done.stdout and "worker 1 done" in done.stdout

    hung = SPAWNS_SLOW_WORKERS.replace("print(f", "time.sleep(60) if rank == 1 else None\n    print(f")
    done = bootstrap(tmp_path, hung, env)
    assert done.returncode != 0
    stall = parse_stall(done.stderr.splitlines())
    assert (stall.rank, stall.last_step) == ("1", 12)  # worker 1, in its own watchdog


# --- full local runs of 2 ranks over gloo -------------------------------------------------------------

# Both ranks all-reduce their gradients at every step; `HANG` decides how one of them leaves the loop.
TWO_RANKS = """
import time
import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        HANG
        model(torch.ones(2, 4) * (rank + 1)).pow(2).mean().backward()
        if SYNC:
            for p in model.parameters():
                dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(PAUSE)
    print(f"rank {rank} finished", flush=True)
"""


def two_ranks(tmp_path: Path, hang: str, sync: str = "True", steps: int = 400, pause: float = 0.05, **keys) -> Path:
    script = TWO_RANKS.replace("HANG", hang).replace("SYNC", sync)
    script = script.replace("STEPS", str(steps)).replace("PAUSE", str(pause))
    ml = {"gpus_per_node": "0", "procs_per_node": "2", "stall_timeout": "3s", "startup_timeout": "60s", **keys}
    return write_job(tmp_path, "two-ranks", ml=ml, files={"train.py": script})


def full_run(job: Path):
    result = CliEntryBasedTestRunner(plugin).invoke(["run", "--full", str(job)])
    match = re.search(r"torchrun's log: (\S+)/agent\.log", result.output)
    return result, Path(match.group(1)) if match else None


@pytest.mark.slow
def test_a_rank_that_stops_calling_the_optimizer_is_stopped_and_named(tmp_path):
    # rank 1 stops stepping (a data loader that never delivers); rank 0 waits for it in all_reduce
    job = two_ranks(tmp_path, "if rank == 1 and step == 3:\n            time.sleep(600)")
    started = time.monotonic()
    result, run_dir = full_run(job)
    assert result.exit_code != 0
    assert time.monotonic() - started < 90  # not the 10 minutes of the sleep
    out = result.output
    assert "full run FAILED" in out and "stalled: no optimizer step for 3s on rank 1 (last step 3)" in out
    assert f"rank 1 exited with code {STALL_EXIT_CODE} (the stall watchdog); where it was:" in out
    assert re.search(r'File ".*/two-ranks/train\.py", line \d+, in <module>\n\s+time\.sleep\(600\)', out)
    assert "rank 1: 3 steps" in out and "stalled" in out.split("rank 1: 3 steps")[1].splitlines()[0]
    assert "raise `stall_timeout`" in out
    # the rank's own log has the stall line and every thread's stack; torchrun saw the stall exit code
    stall = parse_stall((run_dir / "rank-1.log").read_text().splitlines())
    assert (stall.rank, stall.last_step, stall.collective) == ("1", 3, None)
    assert f"exitcode  : {STALL_EXIT_CODE}" in (run_dir / "agent.log").read_text()
    record = json.loads((run_dir / "rank-1.json").read_text())
    assert record["status"] == "stalled" and record["stall"]["last_step"] == 3


@pytest.mark.slow
def test_a_rank_blocked_in_a_collective_is_stopped_by_its_watchdog(tmp_path):
    # rank 1 diverged: it trains on without the collective, so rank 0 waits in gloo's all_reduce, in C++
    # with the GIL released; its watchdog thread still runs
    job = two_ranks(tmp_path, "pass", sync="not (rank == 1 and step >= 3)")
    result, run_dir = full_run(job)
    assert result.exit_code != 0
    out = result.output
    assert "stalled: no optimizer step for 3s on rank 0 (last step 3), waiting in the collective all_reduce" in out
    where = out.split("rank 0 exited with code")[1]
    assert re.search(r'distributed_c10d\.py", line \d+, in all_reduce', where)
    assert re.search(r'two-ranks/train\.py", line \d+, in <module>\n\s+dist\.all_reduce\(p\.grad\)', where)
    record = json.loads((run_dir / "rank-0.json").read_text())
    assert record["status"] == "stalled" and record["stall"]["collective"] == "all_reduce"


@pytest.mark.slow
def test_a_healthy_run_slower_than_the_progress_period_is_not_stopped(tmp_path):
    # every step takes 1 s, longer than the progress period; the stall timeout is 3 s
    job = two_ranks(tmp_path, "pass", steps=5, pause=1.0)
    (job / "config.ini").write_text(
        (job / "config.ini").read_text() + "\n[ml-training.env]\nVDK_ML_TRAINING_PROGRESS_SECONDS = 0.2\n"
    )
    result, _ = full_run(job)
    assert result.exit_code == 0, result.output
    assert "full run PASSED" in result.output and "stalled" not in result.output
    assert "rank 0 finished" in result.output
