"""What the smoke check cannot emulate on CPU is said to be a limit of the check, not a bug in the code: the
summary names the construct and the narrowest switch (keep that construct out of smoke runs), not turning
device tracking off. Each gap is a small job written for its test, through the real `vdk run`."""

from __future__ import annotations

import textwrap

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import smoke_run

pytestmark = pytest.mark.slow

LIMIT = "cannot run on the smoke run's virtual GPUs (CPU kernels, gloo for NCCL): this is a limit of the smoke check"
GUARD = '`if os.environ.get("VDK_ML_TRAINING_MODE") != "smoke":`'

SETUP = """
import os
import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
model = torch.nn.Linear(4, 4).cuda()
"""
TRAIN = """
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 4, device="cuda")).sum().backward()
    optimizer.step()
"""
GAPS = {
    "fsdp1": (
        "from torch.distributed.fsdp import FullyShardedDataParallel\nmodel = FullyShardedDataParallel(model)",
        "FSDP (the first version, FullyShardedDataParallel)",
        f"wrap the model with FSDP only under {GUARD}",
    ),
    "cuda-graph": (
        "graph = torch.cuda.CUDAGraph()",
        "CUDA graphs (torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables)",
        f"run the step eagerly in smoke runs: put the capture and the replay under {GUARD}",
    ),
    "cuda-generator": (
        'noise = torch.randn(4, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))',
        'a CUDA random number generator (torch.Generator(device="cuda"))',
        'make it on the CPU in smoke runs: `torch.Generator(device="cpu")` unless',
    ),
    "dtensor-operator": (
        # heads of q sharded, k and v whole: GPUs shard them too (a CUDA kernel's sharding rule), CPUs cannot
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import Replicate, Shard, distribute_tensor\n"
        "mesh = init_device_mesh('cuda', (2,))\n"
        "q = distribute_tensor(torch.randn(2, 4, 8, 8, device='cuda'), mesh, [Shard(1)])\n"
        "kv = distribute_tensor(torch.randn(2, 4, 8, 8, device='cuda'), mesh, [Replicate()])\n"
        "torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True)",
        "the DTensor operator aten._scaled_dot_product_flash_attention_for_cpu (the CPU kernel standing in for a "
        "CUDA one has no DTensor sharding rule)",
        "compute it on local shards in smoke runs",
    ),
    "nccl-version": (
        "print(f'NCCL {torch.cuda.nccl.version()}')",
        "a CUDA-only part of torch (torch._C._nccl_version)",
        f"keep that call out of smoke runs: {GUARD}",
    ),
}


@pytest.mark.parametrize("gap", list(GAPS))
def test_a_construct_the_cpu_cannot_emulate_is_named_with_the_narrowest_switch(tmp_path, gap):
    code, construct, switch = GAPS[gap]
    script = SETUP + textwrap.dedent(code) + "\n" + TRAIN
    job = write_job(tmp_path, gap, ml="gpus_per_node = 2\nsmoke_steps = 2\n", files={"train.py": script})
    done = smoke_run(job, timeout=400)
    out = done.stdout
    assert done.returncode != 0, out
    limit = f"{construct} {LIMIT}, not a bug in your code"
    assert f"note: {limit}" in out, out  # beside the traceback
    fix = out[out.index("Fix: ") :]
    assert fix.startswith(f"Fix: {limit}. Narrowest switch: {switch}"), fix
    assert "smoke runs set VDK_ML_TRAINING_MODE=smoke; the cluster run is unchanged" in fix
    assert "`vdk deploy --skip-smoke` skips the whole check instead" in fix
    assert "smoke_device_tracking" not in fix  # not the check of devices: it is not what fails


def test_the_switch_keeps_the_construct_out_of_smoke_runs_only(tmp_path):
    code = "if os.environ.get('VDK_ML_TRAINING_MODE') != 'smoke':\n    print(f'NCCL {torch.cuda.nccl.version()}')"
    script = SETUP + code + "\n" + TRAIN
    job = write_job(tmp_path, "guarded", ml="gpus_per_node = 2\nsmoke_steps = 2\n", files={"train.py": script})
    done = smoke_run(job, timeout=400)
    assert done.returncode == 0, done.stdout
    assert "smoke run PASSED" in done.stdout
