"""RPC and spawn patterns of PyTorch's examples and tutorials end cleanly in the smoke check (issue 33, points 2 and
3), with the real CLI on CPU (2 ranks, TensorPipe and gloo on loopback): a `DistributedOptimizer` step counts and is
cut as a torch.optim step is. Each job is written for its test: tiny models, synthetic data, a few steps."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.registry import free_port
from tests.support.vdk_cli import SMOKE_PASSED
from tests.support.vdk_cli import smoke_run

pytestmark = pytest.mark.slow

PASSED = SMOKE_PASSED


def passed(done: subprocess.CompletedProcess, processes: int = 2) -> str:
    out = done.stdout
    assert done.returncode == 0, out
    match = PASSED.search(out)
    assert match and int(match.group(2)) == processes, out
    return out


# The parameter-server pattern of PyTorch's RPC examples: rank 1 holds half of the model and never steps; rank 0
# trains over a DataLoader with dist_autograd and a DistributedOptimizer (SGD: TorchScript's functional SGD on
# each owner), for 50 epochs.
RPC_DISTRIBUTED_OPTIMIZER = """
import os

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import nn
from torch.distributed.optim import DistributedOptimizer
from torch.utils.data import DataLoader, TensorDataset


class Remote(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 4)

    def forward(self, x):
        return self.layer(x)

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.layer.parameters()]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.remote = rpc.remote("ps", Remote)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.remote.rpc_sync().forward(x))

    def parameter_rrefs(self):
        return [rpc.RRef(p) for p in self.head.parameters()] + self.remote.rpc_sync().parameter_rrefs()


def train():
    model = Net()
    optimizer = DistributedOptimizer({optimizer}, model.parameter_rrefs(), lr=0.05)
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    for epoch in range(50):
        for x, y in data:
            with dist_autograd.context() as context_id:
                loss = nn.functional.mse_loss(model(x), y)
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
        print(f"epoch {{epoch}} loss {{loss.item():.4f}}", flush=True)
    print("trained", flush=True)


rank = int(os.environ["RANK"])
rpc.init_rpc("trainer" if rank == 0 else "ps", rank=rank, world_size=2)
if rank == 0:
    train()
rpc.shutdown()
print(f"rank {{rank}} done", flush=True)
"""


def rpc_job(tmp_path: Path, name: str, optimizer: str, ml: str = "") -> Path:
    script = textwrap.dedent(RPC_DISTRIBUTED_OPTIMIZER.format(optimizer=optimizer))
    config = f"gpus_per_node = 2\nsmoke_steps = 2\nsmoke_timeout = 2m\n{ml}"
    return write_job(tmp_path, name, ml=config, files={"train.py": script})


# torch.optim.SGD goes through TorchScript's functional SGD on each owner; NAdam has no functional one in
# DistributedOptimizer's map (a torch.optim optimizer in _LocalOptimizer, stepped in RPC's threads of both ranks):
# its steps are counted once, on the caller, and no rank's end is raised in an RPC thread.
@pytest.mark.parametrize("optimizer", ["torch.optim.SGD", "torch.optim.NAdam"])
def test_distributed_optimizer_steps_count_and_are_cut_as_torch_optim_steps(tmp_path, optimizer):
    out = passed(smoke_run(rpc_job(tmp_path, "rpc-dist-optim", optimizer, "smoke_resume = off\n")))
    assert re.search(r"rank 0: 2 steps, last loss \d\S*, the script ended", out), out
    assert "rank 1: 0 steps, the script ended" in out, out  # the owner's part of the step is not another step
    assert "epoch 0 loss" in out and "epoch 1 loss" not in out, out  # cut after its first epoch, not 50
    assert "end of training: the script left its training loop (train.py:" in out, out
    assert "trained" in out and "rank 0 done" in out, out  # and rpc.shutdown() completed on both (rank 1 ended)


# An RPC observer: rank 1 only records what rank 0 sends it and waits in rpc.shutdown() for every worker; rank 0
# trains with torch.optim. The resume check's first start stops rank 0 as a preemption does, where its script's own
# rpc.shutdown() never runs: the observer waited there until smoke_timeout.
RPC_OBSERVER = """
import os

import torch
import torch.distributed.rpc as rpc
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

seen = []


def record(epoch, loss):
    seen.append((epoch, loss))


rank = int(os.environ["RANK"])
rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
if rank == 0:
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    for epoch in range(50):
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        rpc.rpc_sync("worker1", record, args=(epoch, loss.item()))
    print("trained", flush=True)
rpc.shutdown()
print(f"rank {rank} done, observed {len(seen)}", flush=True)
"""


def test_an_rpc_observer_that_never_steps_ends_at_the_agreed_end(tmp_path):
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_timeout = 3m\n"
    out = passed(
        smoke_run(write_job(tmp_path, "rpc-observer", ml=ml, files={"train.py": textwrap.dedent(RPC_OBSERVER)}))
    )
    assert float(PASSED.search(out).group(1)) < 90, out  # in seconds, not at smoke_timeout
    assert re.search(r"rank 0: 2 steps, last loss \S+, stopped as planned", out), out  # the first start's stop
    assert "rank 1: 0 steps, the script ended" in out, out
    assert "rank 1 took no optimizer step while the others trained" in out, out
    assert "end of training: the script left its training loop (train.py:" in out, out
    assert "rank 0 done" in out, out


# PyTorch's DDP tutorial: run_demo spawns its workers twice, each time a process group of their own.
TWO_SPAWNS = """
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def demo(rank, world_size, name, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(nn.Linear(10, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for _ in range(20):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(torch.randn(20, 10)), torch.randn(20, 5)).backward()
        optimizer.step()
    dist.destroy_process_group()
    print(f"{name} done on rank {rank}", flush=True)


def run_demo(name, world_size, port):
    mp.spawn(demo, args=(world_size, name, port), nprocs=world_size, join=True)


if __name__ == "__main__":
    run_demo("basic", 2, {first})
    run_demo("checkpoint", 2, {second})
    print("all demos done", flush=True)
"""


def test_a_script_that_spawns_its_workers_twice_passes(tmp_path):
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_timeout = 3m\nsmoke_resume = off\n"
    script = textwrap.dedent(TWO_SPAWNS.replace("{first}", str(free_port())).replace("{second}", str(free_port())))
    out = passed(smoke_run(write_job(tmp_path, "two-spawns", ml=ml, files={"train.py": script})))
    # the second spawn's workers were SIGTERMed as leftovers of the first's: "process 0 terminated with signal SIGTERM"
    assert "basic done on rank 0" in out and "checkpoint done on rank 0" in out and "all demos done" in out, out
    assert "the launcher process: spawned 4 workers in 2 calls, the script ended" in out, out  # counted, not from GPUs
    assert re.search(r"rank 1: 2 steps, last loss \S+, the script ended", out), out


# A spawned worker that never gets its data: the timeout's report shows where it waited, in the job's code (it
# showed the worker's `-c` program, 'File "<string>", line 1', and a worker that torch's SIGINT reached when its
# launcher was stopped was said to have failed with KeyboardInterrupt).
SPAWNED_WORKER_HANGS = """
import time

import torch
import torch.multiprocessing as mp
from torch import nn


def wait_for_data(rank):
    while rank == 1:
        time.sleep(0.2)


def work(rank):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wait_for_data(rank)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
"""


def test_a_spawned_worker_that_hangs_is_shown_at_its_own_frame(tmp_path):
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_timeout = 30s\nsmoke_resume = off\n"
    job = write_job(tmp_path, "spawned-hang", ml=ml, files={"train.py": textwrap.dedent(SPAWNED_WORKER_HANGS)})
    done = smoke_run(job)
    out = done.stdout
    assert done.returncode != 0 and "timed out after 30s (smoke_timeout): rank 1 still running" in out, out
    where = out.split("rank 1 was at:", 1)[1].strip().splitlines()
    assert re.search(r'File ".*train\.py", line \d+ in wait_for_data', where[0]), out
    assert '"<string>"' not in out and "KeyboardInterrupt" not in out, out
    assert "rank 1: 0 steps, stopped unfinished" in out, out


# A script's own multiprocessing worker (a producer feeding a queue, not a rank: no mp.spawn) and a schedule-free
# style optimizer (a torch.optim.Optimizer whose step is its own and never calls the base class's), as in the
# corpus: the steps count and are cut, the worker ends with the script, the code after the loop runs.
OWN_WORKER_AND_OPTIMIZER = """
import multiprocessing as mp

import torch


class ScheduleFreeSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    z = self.state[p].setdefault("z", p.detach().clone())
                    z.add_(p.grad, alpha=-group["lr"])
                    p.lerp_(z, 0.5)


def producer(queue):
    torch.manual_seed(0)
    while True:
        queue.put(torch.randn(8, 4))


if __name__ == "__main__":
    queue = mp.Queue(maxsize=4)
    worker = mp.Process(target=producer, args=(queue,), daemon=True)
    worker.start()
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = ScheduleFreeSGD(model.parameters())
    for epoch in range(50):
        for step in range(20):
            loss = model(queue.get().cuda()).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss={loss.item():.4f}", flush=True)
    worker.terminate()
    worker.join()
    torch.save(model.state_dict(), "final.pt")
    print("after the loop: saved", flush=True)
"""


def test_a_scripts_own_worker_process_and_its_own_optimizer_class_end_at_the_agreed_end(tmp_path):
    ml = "gpus_per_node = 1\nsmoke_steps = 2\nsmoke_timeout = 2m\nsmoke_resume = off\n"
    job = write_job(tmp_path, "own-worker", ml=ml, files={"train.py": textwrap.dedent(OWN_WORKER_AND_OPTIMIZER)})
    out = passed(smoke_run(job), processes=1)
    assert re.search(r"rank 0: 2 steps, last loss \d\S*", out), out  # its own step() counted, and cut there
    assert "epoch 0 loss" in out and "epoch 1 loss" not in out, out  # not 50 epochs
    assert "after the loop: saved" in out and "1 save" in out, out  # the worker stopped, the code after it ran
