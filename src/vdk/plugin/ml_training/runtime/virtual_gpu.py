"""The smoke run's virtual GPUs: torch's device APIs say there are CUDA GPUs, and they live in CPU memory.

`torch.cuda.*`, `torch.accelerator.*` and the distributed helpers that pick a backend or a mesh for a
device answer as on a machine with `count` GPUs (the GPUs this rank's node has in the smoke layout);
streams, events and memory statistics are plausible stand-ins. Tensors placed on a virtual GPU are
CPU tensors that remember the GPU (device_tracking.py). The plugin itself gets the real answers from
`real_cuda_available()` and `real_device_count()`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from typing import Any

import torch

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import moved

CPU = torch.device("cpu")
NAME = "vdk virtual GPU (smoke run on CPU)"
CAPABILITY = (8, 0)  # an A100's: bf16 and TF32 are "supported", as on the GPUs most jobs train on

# The real torch.cuda functions, kept before they are replaced.
_REAL: dict[str, Any] = {
    "is_available": torch.cuda.is_available,
    "device_count": torch.cuda.device_count,
}


def real_cuda_available() -> bool:
    """What torch.cuda.is_available() said before the virtual GPUs were installed."""
    return bool(_REAL["is_available"]())


def real_device_count() -> int:
    return int(_REAL["device_count"]())


def no_gpus() -> RuntimeError:
    """What CUDA code meets on a node without GPUs (a job with gpus_per_node = 0)."""
    error = RuntimeError("No CUDA GPUs are available")
    error._vdk_virtual_gpu = True  # type: ignore[attr-defined]
    return error


def invalid_ordinal() -> RuntimeError:
    """CUDA's error for a GPU index that does not exist on this node (torch.AcceleratorError since 2.8)."""
    error = getattr(torch, "AcceleratorError", RuntimeError)(
        "CUDA error: invalid device ordinal\nGPU device may be out of range, do you have enough GPUs?\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    )
    error._vdk_virtual_gpu = True  # type: ignore[attr-defined]
    return error


class VirtualGPUs:
    """The node's virtual GPUs and the one this process has selected (torch.cuda.set_device). A job
    without GPUs (gpus_per_node = 0) has none: CUDA code fails as on its nodes."""

    def __init__(self, count: int):
        self.count = max(0, count)
        self.current = 0
        self.devices = [torch.device("cuda", i) for i in range(self.count)]

    def index(self, device: Any = None) -> int:
        """The GPU index `device` names (None, "cuda", "cuda:1", 1, torch.device): checked like CUDA does."""
        if self.count == 0:
            raise no_gpus()
        if device is None:
            return self.current
        if isinstance(device, torch.device):
            index = device.index
        elif isinstance(device, str):
            index = torch.device(device).index
        elif isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            index = getattr(device, "index", None)  # a stream or an event
        if index is None or index == -1:
            return self.current
        if not 0 <= index < self.count:
            raise invalid_ordinal()
        return index

    def device(self, index: int | None = None) -> torch.device:
        return self.devices[self.current if index is None else index]

    def select(self, device: Any) -> None:
        if isinstance(device, torch.device) and device.type not in ("cuda",):
            return  # torch.cuda.set_device(torch.device("cpu")) is ignored by torch too
        self.current = self.index(device)


class VirtualStream:
    """Stands in for torch.cuda.Stream: work on a CPU is never asynchronous, so waiting is a no-op."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        gpus = _gpus()
        self.device = gpus.device(gpus.index(device)) if gpus else torch.device("cuda", 0)
        self.device_index = self.device.index
        self.device_type = 1  # DeviceType.CUDA, for code that reads it
        self.priority = priority
        self.stream_id = 0
        self.cuda_stream = 0

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> VirtualEvent:
        event = event if event is not None else VirtualEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False  # no CUDA graph is being captured

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> VirtualStream:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VirtualStream) and other.device == self.device

    def __hash__(self) -> int:
        return hash(("vdk-virtual-stream", self.device))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device={self.device} (virtual)>"


class VirtualEvent:
    """Stands in for torch.cuda.Event; elapsed_time() measures wall time between two records."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **kw: Any):
        self.enable_timing = enable_timing
        self._at: float | None = None

    def record(self, stream: Any = None) -> VirtualEvent:
        self._at = time.perf_counter()
        return self

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: VirtualEvent) -> float:
        if self._at is None or end_event._at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._at - self._at) * 1000.0


class _Properties:
    """What torch.cuda.get_device_properties() returns, for code that reads a name or the memory."""

    def __init__(self, index: int):
        self.name = NAME
        self.major, self.minor = CAPABILITY
        self.total_memory = _host_memory()[1]
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.uuid = f"vdk-virtual-gpu-{index}"
        self.L2_cache_size = 0
        self.warp_size = 32
        self.gcnArchName = ""

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, virtual=True)"


def _host_memory() -> tuple[int, int]:
    """(free, total) bytes of this machine: the virtual GPUs' memory is the host's."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _peak_bytes()


def _peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _memory_stats(device: Any = None) -> dict[str, int]:
    now, peak = _resident_bytes(), _peak_bytes()
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = now
        stats[f"{kind}.all.peak"] = peak
        stats[f"{kind}.all.allocated"] = peak
        stats[f"{kind}.all.freed"] = 0
    stats.update({"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0, "num_device_free": 0})
    return stats


_installed: VirtualGPUs | None = None


def _gpus() -> VirtualGPUs | None:
    return _installed


def install(a: Adaptations, count: int) -> VirtualGPUs:
    """Replace torch's device APIs with the virtual GPUs' answers in this process."""
    global _installed
    gpus = VirtualGPUs(count)
    _installed = gpus
    _cuda_module(a, gpus)
    _accelerator_module(a, gpus)
    _distributed(a, gpus)
    _data_parallel(a)
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
        answer("get_device_properties", lambda device=None: _Properties(gpus.index(device))),
    )
    a.replace(cuda, "get_arch_list", answer("get_arch_list", lambda: ["sm_80"]))
    a.replace(cuda, "get_gencode_flags", answer("get_gencode_flags", lambda: ""))
    a.replace(cuda, "is_bf16_supported", answer("is_bf16_supported", lambda including_emulation=True: True))
    a.replace(cuda, "is_tf32_supported", answer("is_tf32_supported", True))
    a.replace(cuda, "can_device_access_peer", answer("can_device_access_peer", lambda device, peer: True))
    a.replace(cuda, "is_current_stream_capturing", answer("is_current_stream_capturing", False))
    a.replace(cuda, "get_sync_debug_mode", answer("get_sync_debug_mode", 0))
    for name in ("memory_allocated", "memory_reserved", "memory_cached", "device_memory_used", "memory_usage"):
        a.replace(cuda, name, answer(name, lambda device=None: _resident_bytes()))
    for name in ("max_memory_allocated", "max_memory_reserved", "max_memory_cached"):
        a.replace(cuda, name, answer(name, lambda device=None: _peak_bytes()))
    a.replace(cuda, "memory_stats", answer("memory_stats", _memory_stats))
    a.replace(cuda, "memory_stats_as_nested_dict", answer("memory_stats_as_nested_dict", lambda device=None: {}))
    a.replace(cuda, "memory_snapshot", answer("memory_snapshot", lambda *args, **kwargs: []))
    a.replace(
        cuda,
        "memory_summary",
        answer("memory_summary", lambda *args, **kwargs: f"{NAME}: {_resident_bytes() / 2**20:.0f} MiB resident\n"),
    )
    a.replace(cuda, "list_gpu_processes", answer("list_gpu_processes", lambda device=None: f"{NAME}: this process"))
    a.replace(cuda, "mem_get_info", answer("mem_get_info", lambda device=None: _host_memory()))
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

        def __exit__(self, *exc: object) -> bool:
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
        a.replace(accelerator, name, lambda original: lambda device=None: _resident_bytes())
    for name in ("max_memory_allocated", "max_memory_reserved"):
        a.replace(accelerator, name, lambda original: lambda device=None: _peak_bytes())
    a.replace(accelerator, "memory_stats", lambda original: _memory_stats)
    a.replace(accelerator, "get_memory_info", lambda original: lambda device=None: _host_memory())

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


def _distributed(a: Adaptations, gpus: VirtualGPUs) -> None:
    """The backend torch picks for a GPU is gloo here; a device mesh of GPUs is one of virtual GPUs."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    c10d = dist.distributed_c10d

    def default_backend(original):
        def get_default_backend_for_device(device: str | torch.device) -> str:
            kind = device.type if isinstance(device, torch.device) else torch.device(device).type
            if kind == "cuda":
                a.note("nccl->gloo")
                return "gloo"
            return original(device)

        return get_default_backend_for_device

    for owner in (dist, c10d):
        a.replace(owner, "get_default_backend_for_device", default_backend)
    post_import.when_imported("torch.distributed.device_mesh", lambda module: _device_mesh(a, module))
    post_import.when_imported(
        "torch.distributed.fsdp._fully_shard._fully_shard", lambda module: _fully_shard(a, gpus, module)
    )


def _device_mesh(a: Adaptations, module: Any) -> None:
    """A mesh of GPUs is a mesh of CPU processes (gloo): DTensor's own code runs below the device mode."""
    mesh_class = getattr(module, "DeviceMesh", None)
    if mesh_class is None:
        return

    original_init = mesh_class.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        meant_for_gpus = _names_cuda(args[:1], kwargs.get("device_type"))
        if meant_for_gpus:
            a.note("device mesh cuda->cpu")
            if args:
                args = ("cpu", *args[1:])
            else:
                kwargs["device_type"] = "cpu"
        original_init(self, *args, **kwargs)
        if meant_for_gpus:
            self._vdk_of_gpus = True

    a.replace(mesh_class, "__init__", lambda original: __init__)


def _names_cuda(positional: tuple, keyword: Any) -> bool:
    value = positional[0] if positional else keyword
    return isinstance(value, str) and value.strip().lower() == "cuda"


def _fully_shard(a: Adaptations, gpus: VirtualGPUs, module: Any) -> None:
    """FSDP2 keeps its parameters and buffers on the virtual GPU its mesh stands for: the default mesh is
    one of GPUs (as on a GPU machine), and a mesh made for "cuda" is one of GPUs."""
    init = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_init")
    if init is None:
        return

    def device_from_mesh(original):
        def _get_device_from_mesh(mesh: Any) -> torch.device:
            if getattr(mesh, "_vdk_of_gpus", False):
                return gpus.device()
            return original(mesh)

        return _get_device_from_mesh

    def default_mesh(original):
        def _init_default_mesh(mesh_dim_names: tuple[str, ...] | None = None) -> Any:
            import torch.distributed as dist
            from torch.distributed.device_mesh import init_device_mesh

            if not dist.is_initialized():
                dist.init_process_group()
            size = dist.distributed_c10d._get_default_group().size()
            return init_device_mesh("cuda", mesh_shape=(size,), mesh_dim_names=mesh_dim_names)

        return _init_default_mesh

    for owner in (init, module):
        a.replace(owner, "_get_device_from_mesh", device_from_mesh)
    a.replace(init, "_init_default_mesh", default_mesh)


def _data_parallel(a: Adaptations) -> None:
    """nn.DataParallel splits batches across GPUs with CUDA kernels; on the virtual GPUs it runs the
    module on one of them, as torch itself does when there is one GPU."""
    from torch.nn.parallel import DataParallel

    def make(original):
        def __init__(self, module, device_ids=None, output_device=None, dim=0):
            torch.nn.Module.__init__(self)
            torch._C._log_api_usage_once("torch.nn.parallel.DataParallel")
            a.note("DataParallel -> one virtual GPU")
            self.module = module
            self.device_ids = []
            self.dim = dim
            self.output_device = None
            self.src_device_obj = CPU

        return __init__

    def forward(original):
        def forward(self, *inputs, **kwargs):
            # DataParallel scatters the inputs onto the GPUs whatever device they are on
            device = _gpus().device(0) if _gpus() else CPU
            inputs, kwargs = moved((inputs, kwargs), device)
            return self.module(*inputs, **kwargs)

        return forward

    a.replace(DataParallel, "__init__", make)
    a.replace(DataParallel, "forward", forward)
