"""Stand-ins that let GPU-targeted PyTorch code run unmodified on CPU: for smoke runs, and for whole
runs that ask for them (VDK_ML_TRAINING_ADAPT_TO_CPU: a rehearsal on CPU-only nodes).

Each stand-in replaces one torch entry point in memory (patching.py); no user file changes. `install()`
puts them all in place, with the virtual GPUs (virtual_gpu/) and device tracking (device_tracking.py),
and returns the `Adaptations` that counts which stand-ins the user's code actually needed, for the summary.
Hugging Face libraries are adapted in `hf_shims` when (and if) the user's code imports them.
"""

from __future__ import annotations

from typing import Any

import torch

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import moved
from vdk.plugin.ml_training.runtime.patching import with_arguments

CPU = torch.device("cpu")


def is_cuda_device(device: Any) -> bool:
    """True for the ways code names a CUDA device: 0, "cuda", "cuda:1", torch.device("cuda", 1)."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0].strip().lower() == "cuda"
    return isinstance(device, int) and not isinstance(device, bool) and device >= 0


def cpu_backend(backend: Any) -> Any:
    """The gloo equivalent of a process group backend that needs GPUs ("nccl", "cuda:nccl,cpu:gloo")."""
    if backend is None:
        return None
    text = str(backend).lower()
    if any(gpu_only in text for gpu_only in ("nccl", "xccl", "hccl", "ucc")):
        return "gloo"
    return backend


def _distributed(a: Adaptations) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return

    def adapt_group_args(arguments: dict) -> None:
        backend = arguments.get("backend")
        if cpu_backend(backend) != backend:
            a.note("nccl->gloo")
            arguments["backend"] = "gloo"
            arguments.pop("pg_options", None)  # NCCL options mean nothing to gloo
        if arguments.get("device_id") is not None:
            arguments.pop("device_id")

    def drop_device_ids(arguments: dict) -> None:
        if arguments.get("device_ids") is not None:
            arguments.pop("device_ids")

    c10d = dist.distributed_c10d
    for owner in (dist, c10d):
        a.replace(owner, "init_process_group", lambda f: with_arguments(f, adapt_group_args))
        a.replace(owner, "new_group", lambda f: with_arguments(f, adapt_group_args))
        a.replace(owner, "barrier", lambda f: with_arguments(f, drop_device_ids))

    from torch.nn.parallel import DistributedDataParallel

    def drop_ddp_devices(arguments: dict) -> None:
        device_ids = arguments.get("device_ids")
        if device_ids is not None or arguments.get("output_device") is not None:
            a.note("DDP device_ids dropped")
            if device_ids and len(device_ids) == 1 and "self" in arguments:
                # DDP moves the inputs of forward() to its device: it still does
                arguments["self"]._vdk_input_device = _cuda_device(device_ids[0])
            arguments["device_ids"] = None
            arguments["output_device"] = None

    a.replace(DistributedDataParallel, "__init__", lambda f: with_arguments(f, drop_ddp_devices))

    def forward(original):
        def forward(self, *inputs, **kwargs):
            device = self.__dict__.get("_vdk_input_device")
            if device is not None:
                inputs, kwargs = moved((inputs, kwargs), device)
            return original(self, *inputs, **kwargs)

        return forward

    a.replace(DistributedDataParallel, "forward", forward)


def _cuda_device(device: Any) -> torch.device:
    if isinstance(device, torch.device):
        return device
    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def _mixed_precision(a: Adaptations) -> None:
    """fp16/bf16 autocast and loss scaling off: on CPU they are slow or unsupported, and a smoke run
    checks that the code trains, not its numerics."""
    from torch.amp.autocast_mode import autocast
    from torch.amp.grad_scaler import GradScaler

    def autocast_off(arguments: dict) -> None:
        if arguments.get("enabled", True):
            a.note("autocast off")
        arguments["enabled"] = False

    def scaler_off(arguments: dict) -> None:
        if arguments.get("enabled", True):
            a.note("GradScaler off")
        arguments["enabled"] = False

    a.replace(autocast, "__init__", lambda f: with_arguments(f, autocast_off))
    a.replace(GradScaler, "__init__", lambda f: with_arguments(f, scaler_off))


def _compile(a: Adaptations) -> None:
    """torch.compile off: compiling takes longer than a smoke run's few steps."""

    def compile_stand_in(original):
        def compile(model=None, **kwargs):
            a.note("torch.compile skipped")
            a.turn_off("torch.compile")
            if model is None:
                return lambda fn: fn
            return model

        return compile

    a.replace(torch, "compile", compile_stand_in)

    def module_compile(original):
        def compile(self, *args, **kwargs):
            a.note("torch.compile skipped")
            a.turn_off("torch.compile")

        return compile

    a.replace(torch.nn.Module, "compile", module_compile)


def _data_loading(a: Adaptations) -> None:
    """No pinned memory without a GPU (torch would warn about it in every rank)."""
    from torch.utils.data import DataLoader

    def unpinned(arguments: dict) -> None:
        if arguments.get("pin_memory"):
            a.note("pin_memory off")
            arguments["pin_memory"] = False

    a.replace(DataLoader, "__init__", lambda f: with_arguments(f, unpinned))


def _multiprocessing(a: Adaptations) -> None:
    """Note the workers an mp.spawn call starts (each is a rank of the smoke run, smoke_rank.py), and
    notice one that starts no process at all: the script trains nothing, and the summary should say why."""
    import sys

    spawn_module = sys.modules.get("torch.multiprocessing.spawn")  # the name `spawn` is the function
    if spawn_module is None:
        return

    def watch(arguments: dict) -> None:
        from vdk.plugin.ml_training.runtime.rank_process import forget_agent_store

        forget_agent_store()
        nprocs = arguments.get("nprocs", 1)  # start_processes's default
        if nprocs == 0:
            a.observe(protocol.SPAWNED_NOTHING)
        if isinstance(nprocs, int):
            a.spawned.append(nprocs)
        if isinstance(nprocs, int) and nprocs:
            a.note(f"mp.spawn -> {nprocs} worker{'s' if nprocs != 1 else ''} on virtual GPUs")

    # mp.spawn calls its module's start_processes; torch.multiprocessing re-exports it
    a.replace(spawn_module, "start_processes", lambda f: with_arguments(f, watch))
    a.replace(torch.multiprocessing, "start_processes", lambda _: spawn_module.start_processes)


def install(gpus: int = 1, track_devices: bool = True) -> Adaptations:
    """Install every smoke-run stand-in in this process: `gpus` virtual GPUs (virtual_gpu/), tensors
    on them in CPU memory with their devices tracked unless `track_devices` is off (device_tracking.py),
    gloo for NCCL, full precision, no compile; returns what they will record."""
    from vdk.plugin.ml_training.runtime import device_tracking
    from vdk.plugin.ml_training.runtime.virtual_gpu import cuda_apis
    from vdk.plugin.ml_training.runtime.virtual_gpu import threads

    a = Adaptations()
    _distributed(a)
    _mixed_precision(a)
    _compile(a)
    _data_loading(a)
    _multiprocessing(a)
    virtual = cuda_apis.install(a, gpus)
    mode = device_tracking.install(a, virtual, track_devices)
    a.exit_on_uninstall(mode)
    threads.install(a, mode)  # on every thread, not only this one
    return a
