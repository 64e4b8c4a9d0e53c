"""torch.distributed on the virtual GPUs: the backend torch picks for a GPU is gloo, a device mesh of GPUs
is one of CPU processes, FSDP2 keeps its parameters on the virtual GPU its mesh stands for, and
nn.DataParallel runs its module on one virtual GPU.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import moved
from vdk.plugin.ml_training.runtime.virtual_gpu_devices import VirtualGPUs
from vdk.plugin.ml_training.runtime.virtual_gpu_devices import installed

CPU = torch.device("cpu")


def install(a: Adaptations, gpus: VirtualGPUs) -> None:
    """torch.distributed's helpers and nn.DataParallel answer for `gpus` in this process."""
    _distributed(a, gpus)
    _data_parallel(a)


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
            device = installed().device(0) if installed() else CPU  # type: ignore[union-attr]
            inputs, kwargs = moved((inputs, kwargs), device)
            return self.module(*inputs, **kwargs)

        return forward

    a.replace(DataParallel, "__init__", make)
    a.replace(DataParallel, "forward", forward)
