"""Smoke runs on virtual GPUs through the real `vdk` CLI: scripts written in the styles of today's
tutorials pass with their ranks in one process group; placement bugs fail with CUDA's message at the
user's line, and the failure says how to turn the check off."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.ddp_scripts import MP_SPAWN_IMPORTS
from tests.support.vdk_cli import SMOKE_PASSED
from tests.support.vdk_cli import smoke_run

pytestmark = pytest.mark.slow

PASSED = SMOKE_PASSED


def vdk_run(job: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    # vdk's report of a hung run, not the test's timeout
    return smoke_run(job, timeout=timeout, smoke_timeout=timeout - 60)


def make_job(
    root: Path, name: str, script: str, ml: str = "gpus_per_node = 2\nsmoke_steps = 2\n", requirements: str = ""
) -> Path:
    job = root / name
    job.mkdir(parents=True)
    (job / "train.py").write_text(textwrap.dedent(script))
    (job / "config.ini").write_text(f"[job]\ntype = ml-training\n\n[ml-training]\n{ml}")
    if requirements:
        (job / "requirements.txt").write_text(requirements)
    return job


def assert_passed_in_one_group(done: subprocess.CompletedProcess, ranks: int = 2, steps: int = 2) -> None:
    out = done.stdout
    assert done.returncode == 0, out
    assert PASSED.search(out) and int(PASSED.search(out).group(2)) == ranks, out
    assert f"world size {ranks}" in out  # printed by rank 0 from dist.get_world_size()
    for rank in range(ranks):
        # stopped at the second epoch, or its script ended after the first
        assert re.search(rf"rank {rank}: {steps} steps, last loss \S+, (stopped as planned|the script ended)", out), out


# PyTorch's examples/distributed/ddp style: torch.accelerator, a GPU-count check that exits without GPUs.
ACCELERATOR_DDP = """
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def verify_min_gpu_count(min_gpus: int = 2) -> bool:
    return torch.accelerator.is_available() and torch.accelerator.device_count() >= min_gpus


def main():
    if not verify_min_gpu_count():
        print("Unable to find 2 GPUs: exiting")
        return
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"{torch.accelerator.current_accelerator()}:{local_rank}")
    torch.accelerator.set_device_index(local_rank)
    dist.init_process_group(backend=dist.get_default_backend_for_device(device), device_id=device)
    if dist.get_rank() == 0:
        print(f"world size {dist.get_world_size()}", flush=True)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(10):
        x, y = torch.randn(8, 16, device=device), torch.randint(0, 4, (8,), device=device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_the_accelerator_ddp_pattern_finds_its_gpus(tmp_path):
    done = vdk_run(make_job(tmp_path, "accelerator-ddp", ACCELERATOR_DDP))
    assert_passed_in_one_group(done)
    assert "Unable to find 2 GPUs" not in done.stdout
    adapted = next(line for line in done.stdout.splitlines() if "adapted for CPU:" in line)
    assert "torch.accelerator -> virtual cuda" in adapted and "nccl->gloo" in adapted


# PyTorch's examples/distributed/FSDP2 style: meta-device init, fully_shard per block, a CUDA mesh.
FSDP2 = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Transformer(nn.Module):
    def __init__(self, vocab=64, dim=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def reset_parameters(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
                module.reset_parameters()


rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
mesh = init_device_mesh("cuda", (dist.get_world_size(),))
if dist.get_rank() == 0:
    print(f"world size {dist.get_world_size()}", flush=True)
with torch.device("meta"):
    model = Transformer()
for layer in model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
model.to_empty(device=device)
model.reset_parameters()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(10):
    tokens = torch.randint(0, 64, (4, 16), device=device)
    loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
"""


def test_fsdp2_with_a_cuda_device_mesh_trains(tmp_path):
    done = vdk_run(make_job(tmp_path, "fsdp2", FSDP2))
    assert_passed_in_one_group(done)
    assert "device mesh cuda->cpu" in done.stdout
    assert "cpu device mesh" not in done.stdout  # DTensor's warning concerns the stand-in, not the code


# Code that branches on torch.cuda.is_available(): the cluster runs the GPU branch, so must the check.
CUDA_BRANCH = """
import torch
import torch.distributed as dist

if torch.cuda.is_available():
    device = torch.device("cuda", torch.cuda.current_device())
    backend = "nccl"
else:
    raise SystemExit("took the CPU path, which the cluster never takes")
dist.init_process_group(backend)
torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
device = torch.device("cuda", torch.cuda.current_device())
if dist.get_rank() == 0:
    print(f"world size {dist.get_world_size()} on {device}", flush=True)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).to(device), device_ids=[device.index])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    loss.backward()
    optimizer.step()
"""


def test_code_branching_on_cuda_availability_takes_its_gpu_path(tmp_path):
    done = vdk_run(make_job(tmp_path, "cuda-branch", CUDA_BRANCH))
    assert_passed_in_one_group(done)
    assert "world size 2 on cuda:0" in done.stdout


# PyTorch's "Getting Started with DDP" / ddp-tutorial-series multigpu.py style: the script spawns one
# worker per GPU itself, which set their own rendezvous on localhost.
MP_SPAWN = (
    MP_SPAWN_IMPORTS
    + """

def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "{port}"
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def main(rank, world_size):
    ddp_setup(rank, world_size)
    if rank == 0:
        print(f"world size {{dist.get_world_size()}}", flush=True)
    data = TensorDataset(torch.randn(256, 20), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=32, pin_memory=True, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(20, 2).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for source, targets in loader:
        source, targets = source.to(rank), targets.to(rank)
        optimizer.zero_grad()
        F.cross_entropy(model(source), targets).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size,), nprocs=world_size)
    print("all workers done")
"""
)


def test_an_mp_spawn_tutorial_runs_one_launcher_that_spawns_a_worker_per_gpu(tmp_path):
    from vdk.plugin.ml_training.local.launcher import free_port

    job = make_job(tmp_path, "mp-spawn", MP_SPAWN.format(port=free_port()), "gpus_per_node = 4\nsmoke_steps = 2\n")
    done = vdk_run(job)
    assert_passed_in_one_group(done)
    out = done.stdout
    assert "1 launcher process that spawns its workers, on 2 virtual GPUs" in out
    assert "the launcher process: spawned 2 workers, the script ended" in out and "all workers done" in out
    assert "mp.spawn -> 2 workers on virtual GPUs" in out


LIGHTNING = """
import torch
import torch.distributed as dist
import lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        if self.global_rank == 0 and batch_idx == 0:
            print(f"world size {{dist.get_world_size()}} on {{self.device}}", flush=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    trainer = L.Trainer(accelerator="{accelerator}", devices={devices}, strategy="ddp", max_epochs=3,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), DataLoader(data, batch_size=16, num_workers=1))
"""


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="PyTorch Lightning is not installed")
@pytest.mark.parametrize("accelerator, devices", [("gpu", 2), ("cuda", 8), ("auto", 2)])
def test_pytorch_lightning_forms_one_process_group_on_the_virtual_gpus(tmp_path, accelerator, devices):
    script = LIGHTNING.format(accelerator=accelerator, devices=devices)
    # one start (the resume check's second is tests/integration/ops/test_resume_check_scripts.py's)
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_resume = off\n"
    job = make_job(tmp_path, f"lightning-{accelerator}", script, ml, requirements="lightning\n")
    done = vdk_run(job)
    assert_passed_in_one_group(done)
    assert "the script ended" in done.stdout and "stopped as planned" not in done.stdout  # fit() returned
    assert "end of epoch: reached (Lightning ended its fit after the first epoch)" in done.stdout
    assert "end of training: Lightning's fit() returned after its first epoch" in done.stdout  # of max_epochs = 3
    assert "world size 2 on cuda:0" in done.stdout
    assert not (job / "lightning_logs").exists()  # logs of a smoke run stay out of the job directory
    if devices == 8:  # the cluster's layout, shrunk to the smoke run's
        assert "Lightning devices=8 -> 2" in done.stdout


TENSOR_PARALLEL = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

device_type = torch.accelerator.current_accelerator().type
mesh = init_device_mesh(device_type, (int(os.environ["WORLD_SIZE"]),))
if dist.get_rank() == 0:
    print(f"world size {dist.get_world_size()}", flush=True)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)).to(device_type)
model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=0.25, foreach=True)
for i in range(10):
    torch.manual_seed(i)
    loss = model(torch.rand(20, 10, device=device_type)).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_tensor_parallel_trains_on_a_cuda_mesh(tmp_path):
    assert_passed_in_one_group(vdk_run(make_job(tmp_path, "tensor-parallel", TENSOR_PARALLEL)))


ACCELERATE = """
import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(mixed_precision="fp16")
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(128, 8), torch.randint(0, 2, (128,)))
loader = DataLoader(data, batch_size=16, shuffle=True, pin_memory=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
class_weights = torch.tensor([1.0, 2.0], device=accelerator.device)
if accelerator.is_main_process:
    print(f"world size {dist.get_world_size()} on {accelerator.device}", flush=True)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x), y, weight=class_weights)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.gather(loss.detach()[None]).mean().item()
"""


def test_accelerate_trains_on_the_virtual_gpus(tmp_path):
    done = vdk_run(make_job(tmp_path, "accelerate", ACCELERATE, requirements="accelerate\n"))
    assert_passed_in_one_group(done)
    assert "world size 2 on cuda:0" in done.stdout


# Placement bugs of hand-written loops; `{bug}` stands on its own line of train.py.
PLACEMENT = """
import numpy as np
import torch
import torch.nn.functional as F

device = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
for step in range(3):
    {bug}
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
BUGS = {
    "input-on-cpu": (
        "loss = F.cross_entropy(model(x), y.to(device))",
        "Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!",
    ),
    "loss-weight-on-cpu": (
        "loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=torch.tensor([1.0, 2.0, 1.0]))",
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    ),
    "numpy-of-gpu-tensor": (
        "loss = F.cross_entropy(model(x.to(device)), y.to(device)); np.mean(model(x.to(device)).detach().numpy())",
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
    ),
    "two-gpus": (
        "loss = F.cross_entropy(model(x.to(device)), y.to('cuda:1'))",
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!",
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_placement_bug_fails_at_the_user_s_line_with_cuda_s_message(tmp_path, bug):
    line, message = BUGS[bug]
    job = make_job(tmp_path, bug, PLACEMENT.format(bug=line), "gpus_per_node = 2\nprocs_per_node = 1\n")
    done = vdk_run(job)
    out = done.stdout
    assert done.returncode != 0, out
    assert "smoke run FAILED" in out and message in out, out
    # the traceback ends where a GPU would raise it: at the user's line, not in the stand-in
    user_line = next(i for i, text in enumerate((job / "train.py").read_text().splitlines(), 1) if line in text)
    traceback = out[out.index("Traceback (most recent call last)") :]
    frames = re.findall(r'File "([^"]+)", line (\d+)', traceback)
    assert (str(job / "train.py"), str(user_line)) in frames
    assert not any("vdk/plugin/ml_training" in path for path, _ in frames), traceback
    assert "set `smoke_device_tracking = false` in [ml-training]" in out  # the way out, if the check is wrong


def test_turning_tracking_off_lets_the_run_pass(tmp_path):
    line, _ = BUGS["input-on-cpu"]
    ml = "gpus_per_node = 1\nsmoke_device_tracking = false\n"
    done = vdk_run(make_job(tmp_path, "untracked", PLACEMENT.format(bug=line), ml))
    assert done.returncode == 0, done.stdout
    assert "cuda tensors -> CPU memory (smoke_device_tracking off)" in done.stdout


GLOO_LIMIT = """
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 4, device="cuda")).sum().backward()
for p in model.parameters():  # NCCL's pre-multiplied sum: gradient averaging without a division kernel
    dist.all_reduce(p.grad, op=dist._make_nccl_premul_sum(1.0 / dist.get_world_size()))
optimizer.step()
"""


def test_a_collective_gloo_lacks_is_named_as_a_limit_of_the_cpu_check(tmp_path):
    done = vdk_run(make_job(tmp_path, "premul-sum", GLOO_LIMIT))
    out = done.stdout
    assert done.returncode != 0
    assert "ReduceOp.PREMUL_SUM is not available in gloo" in out, out
    assert "a limit of the CPU check, not a bug in your code" in out


def test_a_job_without_gpus_sees_none_and_cuda_code_fails_as_on_its_nodes(tmp_path):
    portable = """
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"running on {device}", flush=True)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4, device=device)).sum().backward()
    optimizer.step()
    """
    done = vdk_run(make_job(tmp_path, "cpu-job", portable, "gpus_per_node = 0\n"))
    assert done.returncode == 0, done.stdout
    assert "running on cpu" in done.stdout  # the path the job's CPU nodes take
    hard_coded = portable.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cuda"')
    done = vdk_run(make_job(tmp_path, "cpu-job-cuda", hard_coded, "gpus_per_node = 0\n"))
    assert done.returncode != 0
    assert "RuntimeError: No CUDA GPUs are available" in done.stdout
    assert "the job asks for no GPU (`gpus_per_node = 0` in [ml-training])" in done.stdout
