"""Stand-ins that let GPU-targeted PyTorch code run unmodified on CPU: for smoke runs, and for whole
runs that ask for them (VDK_ML_TRAINING_ADAPT_TO_CPU: a rehearsal on CPU-only nodes).

Each stand-in replaces one torch entry point in memory; no user file changes. `install()` returns
the `Adaptations` that counts which stand-ins the user's code actually needed, for the summary.
Hugging Face libraries are adapted in `hf_shims` when (and if) the user's code imports them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from vdk.plugin.ml_training.runtime import protocol

CPU = torch.device("cpu")


class Adaptations:
    """Which stand-ins fired, and how often; plus the originals, so tests can uninstall them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.observed: set[str] = set()  # what the code did that explains a failure, e.g. spawning no process
        self._originals: list[tuple[Any, str, Any]] = []
        self._mode: TorchFunctionMode | None = None

    def note(self, what: str) -> None:
        self.counts[what] += 1

    def observe(self, what: str) -> None:
        self.observed.add(what)

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Set `owner.name` to `make(original)`; a missing attribute is left alone."""
        original = getattr(owner, name, None)
        if original is None:
            return
        replacement = make(original)
        if callable(replacement) and not isinstance(replacement, type):
            try:
                functools.update_wrapper(replacement, original)
            except (AttributeError, TypeError):
                pass
        self._originals.append((owner, name, original))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()


def is_cuda_device(device: Any) -> bool:
    """True for the ways code names a CUDA device: 0, "cuda", "cuda:1", torch.device("cuda", 1)."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0].strip().lower() == "cuda"
    return isinstance(device, int) and not isinstance(device, bool) and device >= 0


class CudaToCpu(TorchFunctionMode):
    """Rewrites CUDA device arguments to CPU on every torch call: `.to(...)`/`.cuda()` of tensors
    (and so of modules, whose `.to`/`.cuda` call those of their tensors) and `device=` of factories."""

    def __init__(self, adaptations: Adaptations):
        super().__init__()
        self.adaptations = adaptations
        tensor = torch.Tensor
        self._to = tensor.to
        # where a device may stand positionally: tensor.to(0) and Module.to(0), which parses with _parse_to
        self._device_position = {tensor.to: 1, torch._C._nn._parse_to: 0}
        self._to_cpu = {tensor.cuda}
        self._identity = {tensor.pin_memory}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._to_cpu:  # tensor.cuda(device=None, non_blocking=False, ...)
            self.adaptations.note("cuda->cpu")
            return self._to(args[0], CPU)
        if func in self._identity:
            return args[0]
        device = kwargs.get("device")
        if device is not None and is_cuda_device(device):
            self.adaptations.note("cuda->cpu")
            kwargs = dict(kwargs, device=CPU)
        position = self._device_position.get(func)
        if position is not None and len(args) > position and is_cuda_device(args[position]):
            self.adaptations.note("cuda->cpu")
            args = (*args[:position], CPU, *args[position + 1 :])
        return func(*args, **kwargs)


def _with_arguments(original: Callable, change: Callable[[dict], None]) -> Callable:
    """A wrapper that binds the call to `original`'s signature, lets `change` edit the arguments
    by name (positional or keyword alike), and calls `original` with them."""
    signature = inspect.signature(original)

    def wrapper(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let the original raise its own, familiar error
        change(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    return wrapper


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
        a.replace(owner, "init_process_group", lambda f: _with_arguments(f, adapt_group_args))
        a.replace(owner, "new_group", lambda f: _with_arguments(f, adapt_group_args))
        a.replace(owner, "barrier", lambda f: _with_arguments(f, drop_device_ids))

    from torch.nn.parallel import DistributedDataParallel

    def drop_ddp_devices(arguments: dict) -> None:
        if arguments.get("device_ids") is not None or arguments.get("output_device") is not None:
            a.note("DDP device_ids dropped")
            arguments["device_ids"] = None
            arguments["output_device"] = None

    a.replace(DistributedDataParallel, "__init__", lambda f: _with_arguments(f, drop_ddp_devices))


class _NoDevice(contextlib.ContextDecorator):
    """Stands in for `torch.cuda.device(i)`: selecting a GPU means nothing on CPU."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _cuda_calls(a: Adaptations) -> None:
    """torch.cuda functions that tutorials call unconditionally and that mean nothing on CPU."""
    cuda = torch.cuda

    def ignored(name: str, result: Any = None):
        def make(original):
            def stand_in(*args, **kwargs):
                a.note(f"torch.cuda.{name} ignored")
                return result

            return stand_in

        return make

    for name in ("set_device", "synchronize", "empty_cache", "ipc_collect", "set_per_process_memory_fraction"):
        a.replace(cuda, name, ignored(name))
    for name in ("reset_peak_memory_stats", "reset_max_memory_allocated", "reset_accumulated_memory_stats"):
        a.replace(cuda, name, ignored(name))
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        a.replace(cuda, name, ignored(name, 0))
    a.replace(cuda, "current_device", ignored("current_device", 0))
    a.replace(cuda, "get_device_name", ignored("get_device_name", "cpu (smoke run)"))
    a.replace(cuda, "device", lambda original: _NoDevice)


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

    a.replace(autocast, "__init__", lambda f: _with_arguments(f, autocast_off))
    a.replace(GradScaler, "__init__", lambda f: _with_arguments(f, scaler_off))


def _compile(a: Adaptations) -> None:
    """torch.compile off: compiling takes longer than a smoke run's few steps."""

    def compile_stand_in(original):
        def compile(model=None, **kwargs):
            a.note("torch.compile skipped")
            if model is None:
                return lambda fn: fn
            return model

        return compile

    a.replace(torch, "compile", compile_stand_in)

    def module_compile(original):
        def compile(self, *args, **kwargs):
            a.note("torch.compile skipped")

        return compile

    a.replace(torch.nn.Module, "compile", module_compile)


def _device_defaults(a: Adaptations) -> None:
    def load_on_cpu(arguments: dict) -> None:
        location = arguments.get("map_location")
        if location is None or is_cuda_device(location):
            arguments["map_location"] = CPU

    a.replace(torch, "load", lambda f: _with_arguments(f, load_on_cpu))

    def default_device(arguments: dict) -> None:
        if is_cuda_device(arguments.get("device")):
            a.note("cuda->cpu")
            arguments["device"] = CPU

    a.replace(torch, "set_default_device", lambda f: _with_arguments(f, default_device))


def _data_loading(a: Adaptations) -> None:
    """No pinned memory without a GPU (torch would warn about it in every rank)."""
    from torch.utils.data import DataLoader

    def unpinned(arguments: dict) -> None:
        if arguments.get("pin_memory"):
            a.note("pin_memory off")
            arguments["pin_memory"] = False

    a.replace(DataLoader, "__init__", lambda f: _with_arguments(f, unpinned))


def _multiprocessing(a: Adaptations) -> None:
    """Notice `mp.spawn(fn, nprocs=torch.cuda.device_count())` starting no process at all: without
    a GPU the count is 0, the script trains nothing and ends, and the summary should say why."""
    import sys

    spawn_module = sys.modules.get("torch.multiprocessing.spawn")  # the name `spawn` is the function
    if spawn_module is None:
        return

    def watch(arguments: dict) -> None:
        if arguments.get("nprocs") == 0:
            a.observe(protocol.SPAWNED_NOTHING)

    # mp.spawn calls its module's start_processes; torch.multiprocessing re-exports it
    a.replace(spawn_module, "start_processes", lambda f: _with_arguments(f, watch))
    a.replace(torch.multiprocessing, "start_processes", lambda _: spawn_module.start_processes)


def install() -> Adaptations:
    """Install every CPU stand-in in this process; returns what they will record."""
    a = Adaptations()
    _distributed(a)
    _cuda_calls(a)
    _mixed_precision(a)
    _compile(a)
    _device_defaults(a)
    _data_loading(a)
    _multiprocessing(a)
    mode = CudaToCpu(a)
    mode.__enter__()
    a._mode = mode
    return a
