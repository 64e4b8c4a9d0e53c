"""The stall watchdog in real training processes: in a job image (the bootstrap without the local
launcher) a rank that stops stepping exits with the stall code and its stack, there is no watchdog
without its settings or once the script ended, and a launcher that spawns its workers hands the watch
over to them; in full local runs of 2 ranks over gloo a rank that stops calling the optimizer or waits
in a collective is stopped and named, and a healthy slow run is never stopped. (The watchdog on a clock
driven by hand: tests/unit/runtime/test_watchdog.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.bootstrap_runs import bootstrap_script
from tests.support.ddp_scripts import steps_then_hangs
from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE
from vdk.plugin.ml_training.runtime.watchdog import parse_stall

# --- in a job image (the bootstrap without the local launcher) ----------------------------------------

STOPS_STEPPING = steps_then_hangs(2, 120, say="waiting for data that never comes")


def bootstrap(cwd: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`script` in a job image, as global rank 2 (the rank its stall lines name)."""
    return bootstrap_script(cwd, script, {"RANK": "2", **env})


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

    # the hand-over shown, a worker that hangs after 3 steps is stopped by its own watchdog
    hung = SPAWNS_SLOW_WORKERS.replace("range(12)", "range(3)")
    hung = hung.replace("print(f", "time.sleep(60) if rank == 1 else None\n    print(f")
    done = bootstrap(tmp_path, hung, env)
    assert done.returncode != 0
    stall = parse_stall(done.stderr.splitlines())
    assert (stall.rank, stall.last_step) == ("1", 3)  # worker 1, in its own watchdog


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
