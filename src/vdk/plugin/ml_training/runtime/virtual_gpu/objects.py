"""What torch.cuda hands out for the virtual GPUs (devices.py): streams and events (work on a
CPU is never asynchronous, so waiting is a no-op), device properties, and memory figures, which are
those of this process and this machine: the virtual GPUs' memory is the host's.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any
from typing import Literal

import torch

from vdk.plugin.ml_training.runtime.virtual_gpu.devices import installed

NAME = "vdk virtual GPU (smoke run on CPU)"
CAPABILITY = (8, 0)  # an A100's: bf16 and TF32 are "supported", as on the GPUs most jobs train on


class VirtualStream:
    """Stands in for torch.cuda.Stream: work on a CPU is never asynchronous, so waiting is a no-op."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        gpus = installed()
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

    def __exit__(self, *exc: object) -> Literal[False]:
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


class DeviceProperties:
    """What torch.cuda.get_device_properties() returns, for code that reads a name or the memory."""

    def __init__(self, index: int):
        self.name = NAME
        self.major, self.minor = CAPABILITY
        self.total_memory = host_memory()[1]
        self.multi_processor_count = os.cpu_count() or 1
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.uuid = f"vdk-virtual-gpu-{index}"
        self.L2_cache_size = 0
        self.warp_size = 32
        self.gcnArchName = ""

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, virtual=True)"


def host_memory() -> tuple[int, int]:
    """(free, total) bytes of this machine: the virtual GPUs' memory is the host's."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


def resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_bytes()


def peak_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory_stats(device: Any = None) -> dict[str, int]:
    now, peak = resident_bytes(), peak_bytes()
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = now
        stats[f"{kind}.all.peak"] = peak
        stats[f"{kind}.all.allocated"] = peak
        stats[f"{kind}.all.freed"] = 0
    stats.update({"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0, "num_device_free": 0})
    return stats
