"""The node's virtual GPUs of a smoke run (or a run adapted to CPU): how many there are, the one this process
selected, and the errors CUDA raises for a GPU that is not there; plus what torch said about the real
GPUs before the virtual ones were installed (`real_cuda_available()`, `real_device_count()`).

The rest of the virtual GPUs: cuda_apis.py (torch's device APIs answer for them), objects.py
(streams, events, device properties, memory figures), distributed.py (backends, meshes,
FSDP2, DataParallel).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

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


def cuda_error(kind: type[Exception], message: str) -> Exception:
    """CUDA's exception type and message, marked as raised by the virtual GPU (for the summary: report.py)."""
    error = kind(message)
    error._vdk_virtual_gpu = True  # type: ignore[attr-defined]  # a mark on the exception object
    return error


def no_gpus() -> Exception:
    """What CUDA code meets on a node without GPUs (a job with gpus_per_node = 0): a RuntimeError."""
    return cuda_error(RuntimeError, "No CUDA GPUs are available")


def invalid_ordinal() -> Exception:
    """CUDA's error for a GPU index that does not exist on this node (torch.AcceleratorError since 2.8)."""
    return cuda_error(
        getattr(torch, "AcceleratorError", RuntimeError),
        "CUDA error: invalid device ordinal\nGPU device may be out of range, do you have enough GPUs?\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    )


class VirtualGPUs:
    """The node's virtual GPUs and the one each thread has selected (torch.cuda.set_device): as with CUDA,
    a thread starts on GPU 0. A job without GPUs (gpus_per_node = 0) has none: CUDA code fails as on its
    nodes."""

    def __init__(self, count: int):
        self.count = max(0, count)
        self._selected = threading.local()
        self.devices = [torch.device("cuda", i) for i in range(self.count)]

    @property
    def current(self) -> int:
        """The GPU this thread selected (0 until it selects one)."""
        return getattr(self._selected, "index", 0)

    @current.setter
    def current(self, index: int) -> None:
        self._selected.index = index

    def index(self, device: Any = None) -> int:
        """The GPU index `device` names (None, "cuda", "cuda:1", 1, torch.device): checked like CUDA does."""
        if self.count == 0:
            raise no_gpus()
        if device is None:
            return self.current
        index: int | None
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


_installed: VirtualGPUs | None = None


def set_up(count: int) -> VirtualGPUs:
    """This process's `count` virtual GPUs: from now on the ones `installed()` returns."""
    global _installed
    _installed = VirtualGPUs(count)
    return _installed


def installed() -> VirtualGPUs | None:
    """This process's virtual GPUs, once `set_up`."""
    return _installed
