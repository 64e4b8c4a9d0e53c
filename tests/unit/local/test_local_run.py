"""`vdk run` of ml-training jobs with real torch, transformers, torchrun and processes: the examples
pass after exactly smoke_steps steps per rank; failures, crashes, hangs and Ctrl-C end every process
and show the root cause once; data jobs run as before; `--full` trains to completion."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import RUNS_DIR_ENV
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
VDK = Path(sys.executable).parent / "vdk"
RANK_LINE = re.compile(r"rank (\d+): (\d+) steps?, .*(?:stopped as planned|the script ended)")
WORK_DIR = re.compile(r"working directory: (\S+)")


def clean_env() -> dict[str, str]:
    """This environment without the plugin's settings, but for where run directories go (conftest)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") or k == RUNS_DIR_ENV}


def vdk_run(*args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    """The real `vdk` executable of this environment; stdout and stderr together, as a user sees them."""
    return subprocess.run(
        [str(VDK), "run", *args],
        env={**clean_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def make_job(root: Path, name: str, script: str, ml: str = "", env: str = "") -> Path:
    """A job whose train.py is `script`; `ml` and `env` as written in config.ini (dedented)."""
    files = {"train.py": textwrap.dedent(script)}
    return write_job(root, name, ml=textwrap.dedent(ml), env=textwrap.dedent(env), files=files)


# A DDP loop of 5 steps on 2 ranks fed by DataLoader workers (whose feeder threads are in every
# rank's stack dump); `{inject}` runs on rank 1 before its first optimizer step.
DDP_LOOP = """
import os, signal, sys, time
from pathlib import Path
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def note_worker(worker):
    Path(os.environ["PID_DIR"], f"{{rank}}-{{worker}}.worker").write_text(str(os.getpid()))

dist.init_process_group("nccl")
rank = dist.get_rank()
Path(os.environ["PID_DIR"], f"{{rank}}.pid").write_text(str(os.getpid()))
model = DDP(torch.nn.Linear(4, 1).to(rank), device_ids=[rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.ones(20, 4))
loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, worker_init_fn=note_worker)
for step, (x,) in zip(range(5), loader):
    loss = model(x.to(rank)).pow(2).mean()
    loss.backward()
    if {condition}:
        {inject}
    optimizer.step()
"""


def ddp_job(root: Path, name: str, inject: str, condition: str = "rank == 1", ml: str = "") -> tuple[Path, Path]:
    pids = root / f"{name}-pids"
    pids.mkdir()
    script = DDP_LOOP.format(inject=inject, condition=condition)
    job = make_job(root, name, script, "nodes = 2\ngpus_per_node = 1\nsmoke_steps = 2\n" + ml, f"PID_DIR = {pids}\n")
    return job, pids


def stack_shows(out: str, header: str, job: Path, line: int) -> bool:
    """`header`, then the stack lines below it, among them the job's train.py at `line`."""
    frame = rf'  File "{re.escape(str(job))}/train.py", line {line} in'
    return re.search(rf"{re.escape(header)}\n(  (File .*|\.\.\.)\n)*{frame}", out) is not None


def no_fifo_left(runs: Path) -> bool:
    return not [p for p in runs.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode)]


def line_of(job: Path, text: str) -> int:
    return next(i for i, line in enumerate((job / "train.py").read_text().splitlines(), 1) if text in line)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def assert_all_gone(pid_dir: Path, expected: int) -> None:
    """The ranks, and the DataLoader workers they started, are gone."""
    pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert len(pids) == expected
    pids += [int(p.read_text()) for p in pid_dir.glob("*.worker")]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


SPAWNED_POOL = """
import multiprocessing as mp
from dataclasses import dataclass
import torch

@dataclass
class Point:
    x: int

def make(i):
    return Point(i)

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("pool:", pool.map(make, range(3)), flush=True)
    model = torch.nn.Linear(2, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2, device="cuda")).sum().backward()
    optimizer.step()
"""


FULL_RUN = """
import json, os
import torch, torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for _ in range(5):
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    steps += 1
with open(f"rank-{rank}.json", "w") as f:
    json.dump({"steps": steps, "world": dist.get_world_size(),
               "stand_ins": "vdk" in dist.init_process_group.__code__.co_filename,
               "output_dir_is_cwd": os.environ.get("VDK_ML_TRAINING_OUTPUT_DIR") == os.getcwd()}, f)
dist.destroy_process_group()
# torch 2.13's gloo sometimes aborts while the interpreter shuts down ("terminate called without an
# active exception", 1 run in ~12 under plain torchrun too): end as some training scripts do.
os._exit(0)
"""


# A script that checks for the GPUs of the cluster's nodes and ends quietly without them.
NEEDS_EIGHT_GPUS = """
import torch

if __name__ == "__main__":
    if torch.cuda.device_count() < 8:
        print("this example needs 8 GPUs")
    else:
        model = torch.nn.Linear(2, 1).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2, device="cuda")).sum().backward()
        optimizer.step()
"""


SPAWNS_NOTHING = """
import sys
import torch.multiprocessing as mp


def main(rank):
    raise AssertionError("never runs")


if __name__ == "__main__":
    mp.spawn(main, nprocs=len(sys.argv[1:]))
"""


def test_full_runs_are_watched_for_stalls_and_smoke_runs_are_not(tmp_path, monkeypatch):
    monkeypatch.setenv(watchdog.STALL_TIMEOUT, "5")  # a value in the shell is not what the job says
    spec = load_job_spec(make_job(tmp_path, "watched", "import torch\n", ml="stall_timeout = 10m\n"))
    full = WatchdogSettings.from_env(full_plan(spec, gpus=0).env)
    assert (full.stall_seconds, full.startup_seconds) == (600, 3600)
    smoke = smoke_plan(spec).env  # the smoke run has its own timeout
    assert watchdog.STALL_TIMEOUT not in smoke and watchdog.STARTUP_TIMEOUT not in smoke


STEPS_THEN_HANGS = """
import time
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
time.sleep(600)
"""
