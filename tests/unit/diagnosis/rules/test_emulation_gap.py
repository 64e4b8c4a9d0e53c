"""Each gap of the smoke run's CPU emulation is named as such, with the construct and the narrowest switch;
errors that would happen on a GPU too are not."""

from __future__ import annotations

import pytest

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.diagnosis.rules.emulation_gap import emulation_gap
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.plan_runner import diagnose

SITE = "/venv/lib/python3.11/site-packages"


def error(message: str, *frames: str) -> dict:
    lines = "".join(f'  File "{path}", line 10, in f\n    x()\n' for path in frames)
    kind = message.split(":", 1)[0]
    return {"type": kind, "message": message, "traceback": f"Traceback (most recent call last):\n{lines}{message}\n"}


GAPS = {
    "dtensor operator": (
        error(
            "NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have "
            "a sharding strategy registered.",
            "/job/train.py",
            f"{SITE}/torch/distributed/tensor/_sharding_prop.py",
        ),
        "the DTensor operator aten._scaled_dot_product_flash_attention_for_cpu (the CPU kernel standing in for a CUDA "
        "one has no DTensor sharding rule)",
        "compute it on local shards in smoke runs",
    ),
    "cuda graph": (
        error("RuntimeError: Tried to instantiate dummy base class CUDAGraph", "/job/train.py"),
        "CUDA graphs (torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables)",
        "run the step eagerly in smoke runs",
    ),
    "cuda generator": (
        error("RuntimeError: Cannot get CUDA generator without ATen_cuda library. PyTorch splits ...", "/job/t.py"),
        'a CUDA random number generator (torch.Generator(device="cuda"))',
        'make it on the CPU in smoke runs: `torch.Generator(device="cpu")`',
    ),
    "fsdp1": (
        error(
            "RuntimeError: unknown parameter type",
            "/job/train.py",
            f"{SITE}/torch/distributed/fsdp/fully_sharded_data_parallel.py",
            f"{SITE}/torch/distributed/fsdp/_runtime_utils.py",
        ),
        "FSDP (the first version, FullyShardedDataParallel)",
        "wrap the model with FSDP only under `if",
    ),
    "pinned memory": (
        error("RuntimeError: pin_memory=True requires a CUDA or other accelerator backend; no pinned memory ...", "/j"),
        "pinned host memory (pin_memory=True outside a DataLoader)",
        "pass `pin_memory=True` only under `if",
    ),
    "torch._C": (
        error("AttributeError: module 'torch._C' has no attribute '_cuda_jiterator_compile_and_launch_kernel'", "/j"),
        "a CUDA-only part of torch (torch._C._cuda_jiterator_compile_and_launch_kernel)",
        "keep that call out of smoke runs",
    ),
    "a library that needs CUDA": (
        error(
            "AssertionError: Torch not compiled with CUDA enabled",
            "/job/train.py",
            f"{SITE}/flash_attn/flash_attn_interface.py",
            f"{SITE}/torch/cuda/__init__.py",
        ),
        "flash_attn, which needs CUDA itself",
        "keep it out of smoke runs",
    ),
}


@pytest.mark.parametrize("gap", list(GAPS))
def test_each_gap_names_the_construct_and_the_narrowest_switch(tmp_path, gap):
    reported, construct, switch = GAPS[gap]
    limit, found = emulation_gap(reported)
    assert limit == (
        f"{construct} cannot run on the smoke run's virtual GPUs (CPU kernels, gloo for NCCL): this is a limit of "
        "the smoke check, not a bug in your code"
    )
    assert found.startswith(switch)
    run = make_run(tmp_path, {0: {"status": "failed", "ended_at": 1.0, "error": reported}, 1: {"status": "stopped"}})
    finding = diagnose(analyse(run))
    assert finding.hints[-1] == limit
    assert finding.fix.startswith(f"{limit}. Narrowest switch: {switch}")
    assert "smoke runs set VDK_ML_TRAINING_MODE=smoke" in finding.fix and "smoke_device_tracking" not in finding.fix


def test_what_fails_on_a_gpu_too_is_not_a_gap():
    gpu_too = error(
        "NotImplementedError: Operator aten.my_custom_op.default does not have a sharding strategy registered.",
        "/job/train.py",
    )
    assert emulation_gap(gpu_too) is None  # a CUDA kernel's operator: DTensor lacks it on GPUs as well
    assert emulation_gap(error("RuntimeError: unknown parameter type", "/job/train.py")) is None  # not FSDP's
    assert emulation_gap(error("ValueError: width 16 is more than 8", "/job/train.py")) is None


def test_a_full_run_on_a_machine_without_gpus_is_not_told_about_the_smoke_check(tmp_path):
    import dataclasses

    from vdk.plugin.ml_training.runtime import protocol

    reported = GAPS["cuda graph"][0]
    run = make_run(tmp_path, {0: {"status": "failed", "ended_at": 1.0, "error": reported}, 1: {"status": "stopped"}})
    run = dataclasses.replace(run, plan=dataclasses.replace(run.plan, mode=protocol.FULL))
    assert "Narrowest switch" not in (diagnose(analyse(run)).fix or "")
