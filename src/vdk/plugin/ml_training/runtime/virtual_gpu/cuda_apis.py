"""The smoke run's virtual GPUs: torch's device APIs say there are CUDA GPUs, and they live in CPU memory.

`torch.cuda.*` and `torch.accelerator.*` answer as on a machine with `count` GPUs (the GPUs this rank's
node has in the smoke layout; devices.py); streams, events and memory statistics are
plausible stand-ins (virtual_gpu_objects.py); the distributed helpers that pick a backend or a mesh for
a device, and DataParallel, use them too (distributed.py); what NCCL accepts and gloo does
not works as with NCCL (nccl_semantics.py), and attention of DTensors as with CUDA's kernels
(attention.py). Tensors placed on a virtual GPU
are CPU tensors that remember the GPU (device_tracking.py).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any
from typing import Literal

import torch

from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.virtual_gpu import attention
from vdk.plugin.ml_training.runtime.virtual_gpu import devices
from vdk.plugin.ml_training.runtime.virtual_gpu import distributed
from vdk.plugin.ml_training.runtime.virtual_gpu import nccl_semantics
from vdk.plugin.ml_training.runtime.virtual_gpu.devices import VirtualGPUs
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import CAPABILITY
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import NAME
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import DeviceProperties
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import VirtualEvent
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import VirtualStream
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import host_memory
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import memory_stats
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import peak_bytes
from vdk.plugin.ml_training.runtime.virtual_gpu.objects import resident_bytes


def install(a: Adaptations, count: int) -> VirtualGPUs:
    """Replace torch's device APIs with the virtual GPUs' answers in this process."""
    gpus = devices.set_up(count)
    _cuda_module(a, gpus)
    _accelerator_module(a, gpus)
    distributed.install(a, gpus)
    nccl_semantics.install(a)
    attention.install(a)
    return gpus


def _note_for_code(a: Adaptations, what: str) -> None:
    """Note an answer the user's code (or a library it uses) asked for; torch asking itself is no news."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    if not caller.startswith("torch."):
        a.note(what)


def _cuda_module(a: Adaptations, gpus: VirtualGPUs) -> None:
    cuda = torch.cuda
    told = f"torch.cuda -> {gpus.count} virtual GPU{'s' if gpus.count != 1 else ''}"
    if gpus.count == 0:
        told = "torch.cuda -> no GPU (gpus_per_node = 0)"

    def answer(name: str, result: Any):
        def stand_in(*args: Any, **kwargs: Any) -> Any:
            _note_for_code(a, told)
            return result(*args, **kwargs) if callable(result) else result

        stand_in.__name__ = name
        return lambda original: stand_in

    a.replace(cuda, "is_available", answer("is_available", lambda: gpus.count > 0))
    a.replace(cuda, "device_count", answer("device_count", lambda: gpus.count))
    # is_initialized() stays False: torch.cuda.manual_seed() and friends queue their calls, as on CPU
    for name in ("init", "_lazy_init", "synchronize", "empty_cache", "ipc_collect", "set_per_process_memory_fraction"):
        a.replace(cuda, name, lambda original: lambda *args, **kwargs: None)
    for name in ("reset_peak_memory_stats", "reset_max_memory_allocated", "reset_accumulated_memory_stats"):
        a.replace(cuda, name, lambda original: lambda *args, **kwargs: None)
    for name in ("reset_max_memory_cached", "set_sync_debug_mode", "set_stream", "set_rng_state", "set_rng_state_all"):
        a.replace(cuda, name, lambda original: lambda *args, **kwargs: None)

    def set_device(device: Any) -> None:
        _note_for_code(a, told)
        gpus.select(device)

    a.replace(cuda, "set_device", lambda original: set_device)
    a.replace(cuda, "current_device", answer("current_device", lambda: gpus.current))
    a.replace(cuda, "get_device_name", answer("get_device_name", lambda device=None: NAME))
    a.replace(cuda, "get_device_capability", answer("get_device_capability", lambda device=None: CAPABILITY))
    a.replace(
        cuda,
        "get_device_properties",
        answer("get_device_properties", lambda device=None: DeviceProperties(gpus.index(device))),
    )
    a.replace(cuda, "get_arch_list", answer("get_arch_list", lambda: ["sm_80"]))
    a.replace(cuda, "get_gencode_flags", answer("get_gencode_flags", lambda: ""))
    a.replace(cuda, "is_bf16_supported", answer("is_bf16_supported", lambda including_emulation=True: True))
    a.replace(cuda, "is_tf32_supported", answer("is_tf32_supported", True))
    a.replace(cuda, "can_device_access_peer", answer("can_device_access_peer", lambda device, peer: True))
    a.replace(cuda, "is_current_stream_capturing", answer("is_current_stream_capturing", False))
    a.replace(cuda, "get_sync_debug_mode", answer("get_sync_debug_mode", 0))
    for name in ("memory_allocated", "memory_reserved", "memory_cached", "device_memory_used", "memory_usage"):
        a.replace(cuda, name, answer(name, lambda device=None: resident_bytes()))
    for name in ("max_memory_allocated", "max_memory_reserved", "max_memory_cached"):
        a.replace(cuda, name, answer(name, lambda device=None: peak_bytes()))
    a.replace(cuda, "memory_stats", answer("memory_stats", memory_stats))
    a.replace(cuda, "memory_stats_as_nested_dict", answer("memory_stats_as_nested_dict", lambda device=None: {}))
    a.replace(cuda, "memory_snapshot", answer("memory_snapshot", lambda *args, **kwargs: []))
    a.replace(
        cuda,
        "memory_summary",
        answer("memory_summary", lambda *args, **kwargs: f"{NAME}: {resident_bytes() / 2**20:.0f} MiB resident\n"),
    )
    a.replace(cuda, "list_gpu_processes", answer("list_gpu_processes", lambda device=None: f"{NAME}: this process"))
    a.replace(cuda, "mem_get_info", answer("mem_get_info", lambda device=None: host_memory()))
    a.replace(cuda, "get_per_process_memory_fraction", answer("get_per_process_memory_fraction", 1.0))
    for name in ("utilization", "temperature", "power_draw", "clock_rate"):
        a.replace(cuda, name, answer(name, lambda device=None: 0))
    a.replace(cuda, "get_rng_state", answer("get_rng_state", lambda device="cuda": torch.get_rng_state()))
    a.replace(cuda, "get_rng_state_all", answer("get_rng_state_all", lambda: [torch.get_rng_state()] * gpus.count))

    a.replace(cuda, "Stream", lambda original: VirtualStream)
    a.replace(cuda, "Event", lambda original: VirtualEvent)
    a.replace(cuda, "current_stream", lambda original: lambda device=None: VirtualStream(device))
    a.replace(cuda, "default_stream", lambda original: lambda device=None: VirtualStream(device))
    a.replace(cuda, "stream", lambda original: lambda stream=None: contextlib.nullcontext(stream))

    class device(contextlib.ContextDecorator):
        """torch.cuda.device(i): selects GPU i inside the block."""

        def __init__(self, device: Any):
            self.idx = gpus.index(device) if device is not None else -1
            self.prev_idx = -1

        def __enter__(self) -> device:
            self.prev_idx = gpus.current
            if self.idx >= 0:
                gpus.current = self.idx
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            gpus.current = self.prev_idx
            return False

    class device_of(device):
        def __init__(self, obj: Any):
            index = obj.get_device() if isinstance(obj, torch.Tensor) else -1
            super().__init__(index if index >= 0 else None)

    a.replace(cuda, "device", lambda original: device)
    a.replace(cuda, "device_of", lambda original: device_of)
    _nvtx(a)


def _nvtx(a: Adaptations) -> None:
    """NVTX ranges (profiling marks) mean nothing without a GPU profiler; the CPU build's stubs raise."""
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is None:
        return
    for name in ("range_push", "range_pop", "range_start", "range_end", "mark"):
        a.replace(nvtx, name, lambda original: lambda *args, **kwargs: 0)
    a.replace(nvtx, "range", lambda original: lambda *args, **kwargs: contextlib.nullcontext())


def _accelerator_module(a: Adaptations, gpus: VirtualGPUs) -> None:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return
    told = "torch.accelerator -> virtual cuda"

    def answer(result: Any):
        def stand_in(*args: Any, **kwargs: Any) -> Any:
            _note_for_code(a, told)
            return result(*args, **kwargs) if callable(result) else result

        return lambda original: stand_in

    cuda = torch.device("cuda")
    a.replace(accelerator, "is_available", answer(lambda: gpus.count > 0))
    # what a CUDA build of torch says: cuda, unless asked whether a GPU is there too and there is none
    a.replace(
        accelerator,
        "current_accelerator",
        answer(lambda check_available=False: None if check_available and gpus.count == 0 else cuda),
    )
    a.replace(accelerator, "device_count", answer(lambda: gpus.count))
    for name in ("current_device_index", "current_device_idx"):
        a.replace(accelerator, name, answer(lambda: gpus.current))
    for name in ("set_device_index", "set_device_idx"):
        a.replace(accelerator, name, answer(gpus.select))
    a.replace(accelerator, "current_stream", answer(lambda device=None: VirtualStream(device)))
    a.replace(accelerator, "get_device_capability", answer(lambda device=None: {"major": 8, "minor": 0}))
    for name in ("set_stream", "synchronize", "empty_cache", "empty_host_cache"):
        a.replace(accelerator, name, lambda original: lambda *args, **kwargs: None)
    for name in ("reset_peak_memory_stats", "reset_accumulated_memory_stats"):
        a.replace(accelerator, name, lambda original: lambda *args, **kwargs: None)
    for name in ("memory_allocated", "memory_reserved"):
        a.replace(accelerator, name, lambda original: lambda device=None: resident_bytes())
    for name in ("max_memory_allocated", "max_memory_reserved"):
        a.replace(accelerator, name, lambda original: lambda device=None: peak_bytes())
    a.replace(accelerator, "memory_stats", lambda original: memory_stats)
    a.replace(accelerator, "get_memory_info", lambda original: lambda device=None: host_memory())

    class device_index:
        """torch.accelerator.device_index(i): selects GPU i inside the block."""

        def __init__(self, device: int | None, /):
            self.idx = device
            self.prev_idx = -1

        def __enter__(self) -> None:
            if self.idx is not None:
                self.prev_idx = gpus.current
                gpus.select(self.idx)

        def __exit__(self, *exc: object) -> None:
            if self.idx is not None:
                gpus.current = self.prev_idx

    a.replace(accelerator, "device_index", lambda original: device_index)
