"""Device tracking on the virtual GPUs: tensors remember the device the code put them on and fail where
CUDA would, with CUDA's message; valid code never fails. torch's own FakeTensorMode, which applies
CUDA's device rules without a GPU, is the judge wherever it can run an operation."""

from __future__ import annotations

import re
import textwrap

import pytest

pytestmark = pytest.mark.slow

# Each case gets a GPU tensor `g` (4x4 on cuda:0), a CPU tensor `c` and runs one operation; in
# FakeTensorMode and under the tracker alike.
RULES = """
import torch.nn.functional as F
CASES = {
    "gpu + cpu": lambda g, c: g + c,
    "gpu + 0-dim cpu": lambda g, c: g + torch.tensor(2.0),
    "gpu * python scalar": lambda g, c: g * 3,
    "cuda:0 + cuda:1": lambda g, c: g + torch.ones(4, 4, device="cuda:1"),
    "cuda:0 * 0-dim cuda:1": lambda g, c: g * torch.tensor(2.0, device="cuda:1"),
    "cat": lambda g, c: torch.cat([g, c]),
    "stack of gpu tensors": lambda g, c: torch.stack([g, g * 2]),
    "matmul": lambda g, c: g @ c,
    "linear with cpu input": lambda g, c: F.linear(c, g),
    "embedding with cpu indices": lambda g, c: F.embedding(torch.tensor([0, 1]), g),
    "cross_entropy with cpu target": lambda g, c: F.cross_entropy(g, torch.tensor([0, 1, 2, 3])),
    "cross_entropy with cpu weight": lambda g, c: F.cross_entropy(
        g, torch.tensor([0, 1, 2, 3], device="cuda"), weight=torch.ones(4)),
    "mse_loss with cpu target": lambda g, c: F.mse_loss(g, c),
    "where with cpu condition": lambda g, c: torch.where(torch.ones(4, 4, dtype=torch.bool), g, 0.0),
    "where with gpu condition": lambda g, c: torch.where(g > 0, g, 0.0),
    "clamp with a cpu tensor": lambda g, c: g.clamp(min=c),
    "gather with cpu index": lambda g, c: g.gather(0, torch.zeros(1, 4, dtype=torch.long)),
    "index_select with cpu index": lambda g, c: g.index_select(0, torch.tensor([0])),
    "masked_fill with cpu mask": lambda g, c: g.masked_fill(torch.ones(4, 4, dtype=torch.bool), 0.0),
    "lerp with 0-dim cpu weight": lambda g, c: torch.lerp(g, g, torch.tensor(0.5)),
    "maximum with 0-dim cpu": lambda g, c: torch.maximum(g, torch.tensor(0.0)),
    "addcmul with 0-dim cpu": lambda g, c: torch.addcmul(g, g, torch.tensor(2.0)),
    "bucketize with cpu boundaries": lambda g, c: torch.bucketize(g, torch.tensor([0.0, 1.0])),
    "type_as moves to the gpu": lambda g, c: c.type_as(g) + g,
    "cpu + cpu": lambda g, c: c + c,
}

def verdicts(make):
    out = {}
    for name, case in CASES.items():
        g, c = make()
        try:
            case(g, c)
            out[name] = "ok"
        except Exception as e:
            out[name] = str(e)
    return out
"""


def test_the_rules_are_torch_s_own(run_python):
    out = run_python(
        "import json, torch\n"
        + RULES
        + """
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    fake = verdicts(lambda: (torch.ones(4, 4, device="cuda"), torch.ones(4, 4)))
from vdk.plugin.ml_training.runtime import cpu_shims
cpu_shims.install(gpus=2)
tracked = verdicts(lambda: (torch.ones(4, 4, device="cuda"), torch.ones(4, 4)))
print(json.dumps({"fake": fake, "tracked": tracked}))
"""
    )
    # the same verdict: both pass, or both fail naming the same two devices (the order in which they
    # are named follows the arguments of the aten operation, which FakeTensor sees and the tracker does not)
    assert {name: _devices(v) for name, v in out["tracked"].items()} == {
        name: _devices(v) for name, v in out["fake"].items()
    }
    mismatches = [name for name, verdict in out["fake"].items() if verdict != "ok"]
    assert len(mismatches) >= 12 and "gpu + 0-dim cpu" not in mismatches  # the table tests both sides
    assert out["tracked"]["gpu + cpu"] == (
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    )


def _devices(verdict: str) -> object:
    found = re.search(r"at least two devices, (\S+) and (\S+)!", verdict)
    return frozenset(found.groups()) if found else verdict


VALID = """
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def net(): return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)

@case
def scalars():
    x = torch.randn(4, 8, device=device)
    y = x * 2 + torch.tensor(1.0) - 3
    torch.where(x > 0, x, 0.0); x.clamp(min=0); y / torch.tensor(4); torch.maximum(x, torch.tensor(0.0))
    assert y.device.type == "cuda"
@case
def cpu_index_tensors():
    x = torch.randn(10, 3, device=device)
    x[torch.tensor([0, 1])]; x[torch.ones(10, dtype=torch.bool)]; x[torch.randperm(10)]
    x[torch.tensor([0])] = 0.0
    x.index_put_((torch.tensor([1]),), torch.tensor(2.0))
@case
def item_tolist_cpu_numpy():
    x = torch.randn(3, device=device)
    x.sum().item(); x.tolist(); x.cpu().numpy(); np.asarray(x.detach().cpu()); x.detach().cpu().numpy()
    x.numpy(force=True); f"{x.sum():.3f}"; print(x); repr(x)
@case
def save_load_map_location():
    m = net(); buf = io.BytesIO(); torch.save({"model": m.state_dict(), "step": torch.tensor(3)}, buf)
    for loc in ("cpu", "cuda:0", None, {"cuda:0": "cpu"}, lambda s, l: s, torch.device("cuda", 0)):
        buf.seek(0); ck = torch.load(buf, map_location=loc); m.load_state_dict(ck["model"])
    buf.seek(0)
    sd = torch.load(buf, map_location="cpu")["model"]
    m2 = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    m2.load_state_dict(sd)
    m2.to(device)
    m2(torch.randn(2, 8, device=device))
@case
def dataloader_pin_memory_non_blocking():
    ds = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    m = net(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for workers in (0, 2):
        for x, y in torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True, num_workers=workers):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(m(x), y); opt.zero_grad(); loss.backward(); opt.step()
@case
def optimizer_state_round_trip():
    m = net()
    optimizers = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.RMSprop, torch.optim.NAdam)
    for Opt in (*optimizers, torch.optim.RAdam, torch.optim.Adagrad):
        for kwargs in ({}, {"foreach": False}, {"foreach": True}):
            opt = Opt(m.parameters(), lr=0.01, **kwargs)
            m(torch.randn(4, 8, device=device)).sum().backward(); opt.step()
            state = copy.deepcopy(opt.state_dict()); buf = io.BytesIO(); torch.save(state, buf); buf.seek(0)
            opt2 = Opt(m.parameters(), lr=0.01, **kwargs); opt2.load_state_dict(torch.load(buf, map_location="cpu"))
            m(torch.randn(4, 8, device=device)).sum().backward(); opt2.step()
    opt = torch.optim.AdamW(m.parameters(), fused=True)
    m(torch.randn(4, 8, device=device)).sum().backward()
    opt.step()
@case
def amp_grad_scaler():
    m = net(); opt = torch.optim.SGD(m.parameters(), lr=0.1); scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(m(torch.randn(4, 8, device=device)), torch.randint(0, 4, (4,), device=device))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    with torch.cuda.amp.autocast(): m(torch.randn(4, 8, device=device))
@case
def schedulers_and_clipping():
    m = net()
    opt = torch.optim.AdamW(m.parameters())
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    m(torch.randn(4, 8, device=device)).sum().backward()
    nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    nn.utils.clip_grad_value_(m.parameters(), 1.0)
    opt.step()
    sched.step()
    torch.nn.utils.parameters_to_vector(m.parameters())
@case
def factories_from_devices():
    x = torch.randn(4, 8, device=device)
    x.new_zeros(3) + torch.zeros_like(x)[0, :3] + torch.arange(3, device=x.device) + torch.ones(3, device=x.device)
    torch.tensor([1.0, 2.0, 3.0], device=device) * x[0, :3]; torch.full((3,), 2.0, device=device).add_(x[0, :3])
    torch.empty(3, device=x.device).copy_(torch.ones(3))
    x.to(torch.bfloat16)
    x.to(x)
    torch.ones(2).to(x)
    torch.ones(2).type_as(x) + x[0, :2]
@case
def embeddings_and_losses():
    emb = nn.Embedding(10, 4).to(device); ids = torch.randint(0, 10, (2, 5), device=device)
    out = emb(ids); F.cross_entropy(out.flatten(0, 1), ids.flatten() % 4)
    w = torch.tensor([1.0, 2.0, 1.0, 1.0], device=device)
    F.cross_entropy(out.flatten(0, 1), ids.flatten() % 4, weight=w)
    F.one_hot(ids, 10).float().sum(); F.nll_loss(out.flatten(0,1).log_softmax(-1), ids.flatten() % 4)
@case
def params_and_buffers():
    p = nn.Parameter(torch.randn(3, device="cuda")); (p * torch.randn(3, device="cuda")).sum().backward()
    m = nn.BatchNorm1d(8).cuda(); m(torch.randn(4, 8).cuda()); m.running_mean + torch.zeros(8, device="cuda")
    with torch.device("cuda"): m2 = nn.Linear(8, 2)
    m2(torch.randn(3, 8, device="cuda"))
    nn.Linear(8, 2, device="cuda")(torch.randn(3, 8, device="cuda"))
@case
def default_device():
    torch.set_default_device("cuda")
    try:
        m = nn.Linear(4, 2); x = torch.randn(3, 4); m(x).sum().backward(); assert x.device.type == "cuda", x.device
    finally:
        torch.set_default_device("cpu")
@case
def ema_deepcopy_and_no_grad():
    m = net(); ema = copy.deepcopy(m)
    with torch.no_grad():
        for pe, p in zip(ema.parameters(), m.parameters()): pe.mul_(0.99).add_(p, alpha=0.01)
    ema.eval(); ema(torch.randn(2, 8, device=device))
@case
def checkpointing():
    m = net(); x = torch.randn(4, 8, device=device, requires_grad=True)
    torch.utils.checkpoint.checkpoint(m, x, use_reentrant=False).sum().backward()
    torch.utils.checkpoint.checkpoint(m, x, use_reentrant=True).sum().backward()
@case
def metrics():
    m = net(); correct = 0; total = torch.zeros((), device=device)
    x, y = torch.randn(8, 8, device=device), torch.randint(0, 4, (8,), device=device)
    pred = m(x).argmax(1); correct += (pred == y).sum().item(); total += (pred == y).sum()
    acc = 100 * correct / len(y)
    torch.distributions.Categorical(logits=m(x)).sample()
    torch.multinomial(m(x).softmax(-1), 1)
    (pred.cpu() == y.cpu()).float().mean()
@case
def cuda_apis():
    torch.cuda.manual_seed_all(0)
    torch.cuda.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    e.record()
    torch.cuda.synchronize()
    s.elapsed_time(e)
    torch.cuda.get_device_name(0)
    torch.cuda.get_device_properties(0).total_memory
    torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.mem_get_info()
    with torch.cuda.device(1): assert torch.cuda.current_device() == 1
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream): torch.ones(2, device="cuda")
    torch.cuda.current_stream().wait_stream(stream); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    torch.accelerator.synchronize(); torch.accelerator.current_stream(); torch.accelerator.memory_allocated()
    g = torch.cuda.get_rng_state(); torch.cuda.set_rng_state(g)
@case
def batch_dicts():
    batch = {"input_ids": torch.randint(0, 10, (2, 4)), "mask": torch.ones(2, 4)}
    batch = {k: v.to(device) for k, v in batch.items()}; (batch["input_ids"] * batch["mask"]).sum()
@case
def cross_device_copies():
    dst = torch.zeros(3, device=device); dst.copy_(torch.ones(3)); cpu = torch.zeros(3); cpu.copy_(dst); cpu += 1
    x = torch.randn(3, device=device); x_cpu = x.cpu(); x_cpu.numpy(); x2 = x_cpu.to(device) + x
@case
def data_parallel():
    m = nn.DataParallel(net()); m(torch.randn(4, 8))
@case
def pinned():
    x = torch.randn(3).pin_memory(); x.is_pinned(); x.to(device, non_blocking=True)
"""


def test_valid_code_never_fails(run_python):
    # what GPU code does every day, including what FakeTensorMode cannot judge (CPU index tensors
    # indexing GPU tensors, copies across devices, checkpoints, DataLoader workers)
    out = run_python(
        textwrap.dedent(
            """
        import copy, io, json, traceback, warnings
        import numpy as np
        import torch, torch.nn as nn, torch.nn.functional as F
        from vdk.plugin.ml_training.runtime import cpu_shims
        cpu_shims.install(gpus=2)
        warnings.simplefilter("ignore")
        results = {}
        def case(fn):
            try:
                fn()
                results[fn.__name__] = "ok"
            except Exception as e:
                results[fn.__name__] = f"{type(e).__name__}: {e}"[:300] + "".join(traceback.format_tb(e.__traceback__))
            return fn
        """
        )
        + VALID
        + "print(json.dumps(results))\n"
    )
    assert len(out) >= 20
    assert {name: verdict for name, verdict in out.items() if verdict != "ok"} == {}


BUGS = """
@case
def input_on_cpu():
    m = nn.Linear(8, 2).to(device); m(torch.randn(4, 8))
@case
def input_from_dataloader_workers():
    ds = torch.utils.data.TensorDataset(torch.randn(16, 8))
    m = nn.Linear(8, 2).to(device)
    for (x,) in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2): m(x)
@case
def target_on_cpu():
    m = nn.Linear(8, 2).to(device); F.cross_entropy(m(torch.randn(4, 8, device=device)), torch.tensor([0, 1, 0, 1]))
@case
def loss_weight_on_cpu():
    m = nn.Linear(8, 2).to(device)
    target = torch.tensor([0, 1, 0, 1], device=device)
    F.cross_entropy(m(torch.randn(4, 8, device=device)), target, weight=torch.tensor([1.0, 3.0]))
@case
def loss_module_weight_on_cpu():
    crit = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0])); m = nn.Linear(8, 2).cuda()
    crit(m(torch.randn(4, 8).cuda()), torch.tensor([0, 1, 0, 1]).cuda())
@case
def numpy_of_gpu_tensor():
    out = nn.Linear(8, 2).to(device)(torch.randn(4, 8, device=device)); out.detach().numpy()
@case
def np_asarray_of_gpu_tensor():
    np.asarray(torch.ones(3, device=device))
@case
def two_gpus():
    torch.ones(3, device="cuda:0") + torch.ones(3, device="cuda:1")
@case
def module_on_other_gpu():
    m = nn.Linear(8, 2).to("cuda:1"); m(torch.randn(4, 8, device="cuda:0"))
@case
def gpu_out_of_range():
    torch.ones(3, device="cuda:2")
@case
def cpu_buffer_added():
    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.l = nn.Linear(8, 8)
            s.pos = torch.randn(8)  # not a buffer: .cuda() leaves it on the CPU
        def forward(s, x):
            return s.l(x) + s.pos.unsqueeze(0).expand(4, 8)
    M().cuda()(torch.randn(4, 8, device=device))
@case
def from_numpy_on_cpu():
    m = nn.Linear(8, 2).cuda(); m(torch.from_numpy(np.ones((4, 8), dtype=np.float32)))
@case
def cat_mixed():
    torch.cat([torch.ones(2, device=device), torch.ones(2)])
"""


def test_placement_bugs_fail_with_cuda_s_own_messages(run_python):
    out = run_python(
        textwrap.dedent(
            """
        import json, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
        from vdk.plugin.ml_training.runtime import cpu_shims
        cpu_shims.install(gpus=2)
        device = "cuda"
        results = {}
        def case(fn):
            try:
                fn()
                results[fn.__name__] = "NO ERROR"
            except Exception as e:
                results[fn.__name__] = f"{type(e).__name__}: {e}"
        """
        )
        + BUGS
        + "print(json.dumps(results))\n"
    )
    to_cpu = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!"
    )
    from_cpu = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    )
    two_gpus = from_cpu.replace("cpu!", "cuda:1!")
    numpy = (
        "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
        "memory first."
    )
    assert out == {
        "input_on_cpu": to_cpu,
        "input_from_dataloader_workers": to_cpu,
        "target_on_cpu": from_cpu,
        "loss_weight_on_cpu": from_cpu,
        "loss_module_weight_on_cpu": from_cpu,
        "numpy_of_gpu_tensor": numpy,
        "np_asarray_of_gpu_tensor": numpy,
        "two_gpus": two_gpus,
        "module_on_other_gpu": two_gpus,
        "gpu_out_of_range": out["gpu_out_of_range"],
        "cpu_buffer_added": from_cpu,
        "from_numpy_on_cpu": to_cpu,
        "cat_mixed": from_cpu,
    }
    assert out["gpu_out_of_range"].startswith("AcceleratorError: CUDA error: invalid device ordinal")


def test_every_way_of_naming_a_gpu_places_tensors_in_cpu_memory_marked_with_their_gpu(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install(gpus=2)
        x = torch.ones(2)
        devices = [0, 1, "cuda", "cuda:1", " CUDA:0", torch.device("cuda"), torch.device("cuda", 1)]
        seen = {}
        for d in devices:
            made = [x.to(d), x.to(device=d), x.to(d, torch.float64), torch.zeros(2, device=d),
                    torch.tensor([1.0], device=d), torch.randn(2, device=d), x.new_zeros(3, device=d),
                    torch.ones_like(x, device=d)]
            seen[repr(d)] = sorted({(str(t.device), t.untyped_storage().device.type) for t in made})
        m = torch.nn.Linear(2, 2)
        m.to(1)
        moved = [str(m.weight.device), m.weight.is_cuda, m.weight.get_device()]
        m.cuda()
        with torch.device("cuda"):
            inside = str(torch.ones(1).device)
        print(json.dumps({
            "seen": seen,
            "cuda_method": [str(x.cuda().device), str(x.cuda(1).device), str(x.cuda(non_blocking=True).device)],
            "module": moved + [str(m.weight.device), str(m.weight.grad)],
            "context": inside,
            "original_stays": [str(x.device), x.numpy().tolist()],
            "dtype_only": [str(x.to(torch.float16).dtype), str(x.cuda().to(torch.float16).device)],
            "repr": repr(torch.ones(2, device="cuda", requires_grad=True) * 2),
            "pinned": str(x.pin_memory().device),
            "counts": a.counts["cuda tensors -> CPU memory (devices tracked)"],
        }))
        """
    )
    expected = {
        "0": "cuda:0",
        "1": "cuda:1",
        "'cuda'": "cuda:0",
        "'cuda:1'": "cuda:1",
        "' CUDA:0'": "cuda:0",
        "device(type='cuda')": "cuda:0",
        "device(type='cuda', index=1)": "cuda:1",
    }
    assert out["seen"] == {name: [[gpu, "cpu"]] for name, gpu in expected.items()}  # said GPU, lives in CPU memory
    assert out["cuda_method"] == ["cuda:0", "cuda:1", "cuda:0"]
    assert out["module"] == ["cuda:1", True, 1, "cuda:0", "None"]
    assert out["context"] == "cuda:0"
    assert out["original_stays"] == ["cpu", [1.0, 1.0]]  # x.to("cuda") is a copy: x itself stays on the CPU
    assert out["dtype_only"] == ["torch.float16", "cuda:0"]
    assert out["repr"] == "tensor([2., 2.], device='cuda:0', grad_fn=<MulBackward0>)"
    assert out["pinned"] == "cpu" and out["counts"] > 50


def test_with_tracking_off_tensors_are_placed_but_not_checked(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install(gpus=2, track_devices=False)
        model = torch.nn.Linear(4, 2).cuda()
        out = model(torch.randn(3, 4))  # input left on the CPU: not noticed
        print(json.dumps({
            "device": str(out.device), "numpy": out.detach().numpy().shape[0],
            "gpus": torch.cuda.device_count(), "counts": dict(a.counts),
        }))
        """
    )
    assert out["device"] == "cpu" and out["numpy"] == 3 and out["gpus"] == 2
    assert out["counts"]["cuda tensors -> CPU memory (smoke_device_tracking off)"] >= 1


def test_checkpoints_hold_no_trace_of_the_smoke_run(run_python, tmp_path):
    saved = tmp_path / "model.pt"
    out = run_python(
        f"""
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        cpu_shims.install(gpus=1)
        model = torch.nn.Linear(2, 2).cuda()
        torch.save({{"model": model.state_dict(), "x": torch.ones(2, device="cuda")}}, {str(saved)!r})
        on_gpu = torch.load({str(saved)!r}, map_location="cuda")
        on_cpu = torch.load({str(saved)!r}, map_location="cpu")
        print(json.dumps({{"gpu": str(on_gpu["x"].device), "cpu": str(on_cpu["x"].device)}}))
        """
    )
    assert out == {"gpu": "cuda:0", "cpu": "cpu"}
    plain = run_python(
        f"""
        import json, torch
        loaded = torch.load({str(saved)!r}, weights_only=True)
        print(json.dumps({{"attributes": sorted(loaded["x"].__dict__), "weight": loaded["model"]["weight"].shape[0]}}))
        """
    )
    assert plain == {"attributes": [], "weight": 2}
