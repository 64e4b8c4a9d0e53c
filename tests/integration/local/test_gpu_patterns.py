"""Modern training patterns that pass on a GPU pass the smoke check too (`vdk run`, the real CLI): FSDP2 with
its default mesh, Accelerate's gather of 2-D and 3-D tensors, ranks whose steps differ, CUDA work on other
threads and in RPC handlers, DTensor attention, DDP's BF16 hook, manual SGD; and a device bug in them is
still caught. Each job is written for its test."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import SMOKE_PASSED
from tests.support.vdk_cli import smoke_run

pytestmark = pytest.mark.slow

PASSED = SMOKE_PASSED


def job(tmp_path: Path, name: str, script: str, ml: str = "gpus_per_node = 2\nsmoke_steps = 2\n", **files) -> Path:
    written = {"train.py": textwrap.dedent(script), **{k.replace("_", "."): v for k, v in files.items()}}
    return write_job(tmp_path, name, ml=ml, files=written)


def passed(done: subprocess.CompletedProcess, ranks: int = 2) -> str:
    out = done.stdout
    assert done.returncode == 0, out
    match = PASSED.search(out)
    assert match and int(match.group(2)) == ranks, out
    return out


def adapted(out: str) -> str:
    return next(line for line in out.splitlines() if "adapted for CPU:" in line)


# FSDP2 as current tutorials write it: no mesh (the default one), a model built on the meta device, then
# to_empty("cuda") and its own initialisation; without and with mixed precision (one run, two models).
FSDP2_DEFAULT_MESH = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(2))
        self.out = nn.Linear(16, 50)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
models, optimizers = {{}}, {{}}
for precision, policy in {{"full": MixedPrecisionPolicy(), "mixed": mixed}}.items():
    with torch.device("meta"):
        model = Net()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device="cuda")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    if dist.get_rank() == 0:
        print(f"{{precision}}: parameters on {{next(model.parameters()).device}}", flush=True)
    models[precision] = model
    optimizers[precision] = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(5):  # both models in turn, each its own step: the smoke run stops when each took 2
    tokens = torch.randint(0, 50, (4, 8){tokens_device})
    for precision, model in models.items():
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1).float(), tokens.flatten())
        loss.backward()
        if dist.get_rank() == 0:
            print(f"{{precision}}: step {{step}} loss {{loss.item():.4f}}", flush=True)
        optimizers[precision].step()
        optimizers[precision].zero_grad()
"""
FSDP2_ML = "gpus_per_node = 2\nsmoke_steps = 2\n"


def test_fsdp2_with_its_default_mesh_and_meta_init_trains_with_and_without_mixed_precision(tmp_path):
    script = FSDP2_DEFAULT_MESH.format(tokens_device=', device="cuda"')
    out = passed(smoke_run(job(tmp_path, "fsdp2-default-mesh", script, FSDP2_ML)))
    assert "full: parameters on cuda:0" in out and "mixed: parameters on cuda:0" in out
    assert "full: step 1 loss" in out and "mixed: step 1 loss" in out, out  # both trained
    assert "step 2 loss" not in out  # and stopped when each took its 2 steps (the total: 4)
    assert re.search(r"rank 0: 4 steps, last loss \S+, stopped as planned", out), out
    assert "FSDP2 default mesh -> virtual GPUs" in adapted(out)


def test_a_device_bug_in_an_fsdp2_model_is_still_caught(tmp_path):
    script = FSDP2_DEFAULT_MESH.format(tokens_device="")  # the batch stays on the CPU
    train = job(tmp_path, "fsdp2-bug", script, FSDP2_ML)
    done = smoke_run(train)
    out = done.stdout
    assert done.returncode != 0, out
    assert "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!" in out
    line = next(i for i, text in enumerate((train / "train.py").read_text().splitlines(), 1) if "model(tokens)" in text)
    assert f'File "{train / "train.py"}", line {line}' in out
    assert "set `smoke_device_tracking = false`" in out  # a device mismatch: the check's own switch


# An evaluation loop that gathers predictions (2-D) and a 3-D tensor from every rank with Accelerate.
GATHER_FOR_METRICS = """
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator()
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(64, 6), torch.randint(0, 3, (64,))), batch_size=8)
evaluation = DataLoader(TensorDataset(torch.randn(32, 6), torch.arange(32)), batch_size=4)
model, optimizer, train, evaluation = accelerator.prepare(model, optimizer, train, evaluation)
for epoch in range(2):
    model.train()
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    for x, index in evaluation:
        with torch.no_grad():
            logits = model(x)
        cube = accelerator.gather_for_metrics(logits[:, None, :].expand(-1, 2, -1).contiguous())
        logits, index = accelerator.gather_for_metrics((logits, index))
        accelerator.print(f"gathered {tuple(logits.shape)} {tuple(cube.shape)} rows {sorted(index.tolist())}")
"""


def test_accelerate_gathers_2d_and_3d_tensors_for_metrics(tmp_path):
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_resume = off\n"  # one start: its evaluation pass only
    out = passed(smoke_run(job(tmp_path, "gather", GATHER_FOR_METRICS, ml, requirements_txt="accelerate\n")))
    gathered = re.findall(r"gathered \((\d+), 3\) \((\d+), 2, 3\) rows \[([0-9, ]+)\]", out)
    assert len(gathered) == 2, out  # the evaluation pass is cut to smoke_steps batches, as the training pass
    for rows, cube_rows, indices in gathered:
        assert int(rows) == int(cube_rows) == 8  # 4 rows from each of the 2 ranks
        assert len(set(indices.split(", "))) == 8  # each rank's own rows
    assert "NCCL tensor shapes on gloo" in adapted(out)


# Each rank trains its own copy and steps every `rank + 1` batches; every rank joins the all-reduce of the
# running loss every second batch, and the averaging of the models after each epoch: valid on GPUs, but the
# ranks reach their end of the smoke run at different points (rank 0 before an all-reduce rank 1 goes into).
UNEVEN_STEPS = """
import os
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
accumulate = rank + 1
model = nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
for epoch in range(3):
    running = torch.zeros(1, device="cuda")
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x.cuda()), y.cuda()) / accumulate
        loss.backward()
        running += loss.detach()
        if (i + 1) % 2 == 0:
            dist.all_reduce(running)
        if (i + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= dist.get_world_size()
"""


def test_ranks_that_step_unevenly_agree_on_the_end_in_seconds_not_at_the_timeout(tmp_path):
    ml = "gpus_per_node = 2\nsmoke_steps = 2\nsmoke_timeout = 3m\n"
    out = passed(smoke_run(job(tmp_path, "uneven", UNEVEN_STEPS, ml)))
    assert float(PASSED.search(out).group(1)) < 120, out  # not at the timeout
    assert re.search(r"rank 0: 2 steps, last loss \S+, stopped as planned", out), out
    assert "end of training: the script left its training loop (train.py:15) after its first epoch" in out
    # rank 1 stepped once by the second epoch; its all-reduce ended when rank 0 stopped: the agreed end
    assert re.search(r"rank 1: 1 step, last loss \S+, stopped as planned", out), out


# CUDA work off the main thread: a thread of the script's own (which, as on CUDA, starts on GPU 0 whatever
# the main thread selected), a thread pool, and a function another rank runs here over torch.distributed.rpc.
THREADS_AND_RPC = """
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed.rpc as rpc

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def doubled_on_the_gpu(x):
    return (x.to("cuda") * 2).sum().item()


torch.cuda.set_device(1)
seen = {}


def work():
    seen["default"] = str(torch.zeros(1, device="cuda").device)
    torch.cuda.set_device(1)
    seen["selected"] = str((torch.ones(4, device="cuda") + 1).device)


thread = threading.Thread(target=work)
thread.start()
thread.join()
with ThreadPoolExecutor(2) as pool:
    pooled = pool.submit(lambda: torch.arange(4, device="cuda").sum().item()).result()
rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world)
remote = rpc.rpc_sync(f"worker{(rank + 1) % world}", doubled_on_the_gpu, args=(torch.ones(3),))
rpc.shutdown()
print(f"rank {rank}: thread {seen['default']} then {seen['selected']}, pool {pooled}, rpc {remote}", flush=True)
model = torch.nn.Linear(3, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 3, device="cuda")).sum().backward()
    optimizer.step()
"""


def test_cuda_work_on_threads_and_in_rpc_handlers_finds_the_virtual_gpus(tmp_path):
    out = passed(smoke_run(job(tmp_path, "threads", THREADS_AND_RPC)))
    assert "rank 0: thread cuda:0 then cuda:1, pool 6, rpc 6.0" in out


# Tensor parallelism that keeps q, k, v as DTensors sharded by heads: flash attention on their shards.
DTENSOR_ATTENTION = """
import os
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, DIM = 4, 32


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, DIM // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if not hasattr(self, "checked"):  # the sharded result is the attention of the whole tensors
            whole = F.scaled_dot_product_attention(q.full_tensor(), k.full_tensor(), v.full_tensor(), is_causal=True)
            print(f"rank {os.environ['RANK']}: matches {torch.allclose(y.full_tensor(), whole, atol=1e-5)}", flush=True)
            self.checked = True
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
model = Attention().cuda()
plan = {name: ColwiseParallel(use_local_output=False) for name in ("q", "k", "v")}
parallelize_module(model, mesh, {**plan, "o": RowwiseParallel()})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(4):
    torch.manual_seed(0)
    model(torch.randn(2, 8, DIM, device="cuda")).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_flash_attention_of_dtensors_runs_on_their_shards(tmp_path):
    out = passed(smoke_run(job(tmp_path, "dtensor-attention", DTENSOR_ATTENTION)))
    assert "rank 0: matches True" in out
    assert "attention of DTensors -> per shard" in adapted(out)


BF16_HOOK = """
import os
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
torch.manual_seed(rank)  # different data on each rank: the gradients are averaged
hooks = {"bf16_compress_hook": default_hooks.bf16_compress_hook,
         "bf16_compress_wrapper": default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook)}
models, optimizers = {}, {}
for name, hook in hooks.items():
    models[name] = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[rank])
    models[name].register_comm_hook(state=None, hook=hook)
    optimizers[name] = torch.optim.SGD(models[name].parameters(), lr=0.1)
for step in range(4):  # both models in turn, each its own step: the smoke run stops when each took 2
    for name, model in models.items():
        model(torch.randn(4, 8, device="cuda")).pow(2).mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        gathered = [[torch.empty_like(g) for _ in range(2)] for g in grads]
        for g, into in zip(grads, gathered):
            dist.all_gather(into, g)
        assert all(torch.equal(a, b) for a, b in gathered), f"the ranks' gradients differ after {name}"
        print(f"rank {rank} {name}: step {step}: gradients averaged", flush=True)  # vdk run shows rank 0
        optimizers[name].step()
        optimizers[name].zero_grad()
"""


def test_ddp_s_bf16_hooks_average_gradients_in_fp32(tmp_path):
    out = passed(smoke_run(job(tmp_path, "bf16-hook", BF16_HOOK)))
    assert "rank 0 bf16_compress_hook: step 1: gradients averaged" in out, out  # the same on every rank (asserted)
    assert "rank 0 bf16_compress_wrapper: step 1: gradients averaged" in out, out
    assert "DDP bf16 hook -> fp32 all-reduce" in adapted(out)


# The word-language-model style: no torch.optim optimizer, the parameters updated by hand.
MANUAL_SGD = """
import torch
from torch import nn

torch.manual_seed(0)
data = torch.randint(0, 20, (400,), device="cuda")
model = nn.Sequential(nn.Embedding(20, 16), nn.Linear(16, 20)).cuda()
criterion = nn.CrossEntropyLoss()
for epoch in range(3):
    for i in range(0, len(data) - 9, 8):
        x, y = data[i : i + 8], data[i + 1 : i + 9]
        model.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.5)
        print(f"batch {i // 8} loss {loss.item():.4g}", flush=True)
"""


def test_manual_sgd_stops_at_smoke_steps_with_the_last_loss(tmp_path):
    out = passed(smoke_run(job(tmp_path, "manual-sgd", MANUAL_SGD, "gpus_per_node = 1\nsmoke_steps = 3\n")), ranks=1)
    losses = dict(re.findall(r"batch (\d+) loss (\S+)", out))
    assert sorted(losses) == ["0", "1", "2"], out  # the fourth batch's backward pass is where it stopped
    assert re.search(rf"rank 0: 3 steps, last loss {re.escape(losses['2'])}, stopped as planned", out), out
    # the first start was stopped (the resume check); started again, it left the batch loop, then the epoch loop as
    # the next epoch's first backward pass began: no update of it
    assert "end of training: the script left its training loop (train.py:9) when it began training again" in out
    assert "no optimizer step was taken" not in out
