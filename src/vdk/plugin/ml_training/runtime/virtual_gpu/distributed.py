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
from vdk.plugin.ml_training.runtime.virtual_gpu.devices import VirtualGPUs
from vdk.plugin.ml_training.runtime.virtual_gpu.devices import installed

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
    # FSDP2 and replicate() take the default mesh and its device from functions each module imported by name
    for name in (
        "torch.distributed.fsdp._fully_shard._fully_shard",
        "torch.distributed._composable.replicate_with_fsdp",
    ):
        post_import.when_imported(name, lambda module: _fully_shard(a, gpus, module))


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
    """FSDP2 (and replicate) keep their parameters and buffers on the virtual GPU their mesh stands for: the
    default mesh is one of GPUs (as on a GPU machine, where torch picks the accelerator's), and a mesh made
    for "cuda" is one of GPUs. `module` imported both functions by name: they are replaced there too."""
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

            if gpus.count == 0:  # a job without GPUs: torch's CPU mesh, as on its nodes
                return original(mesh_dim_names)
            if not dist.is_initialized():
                dist.init_process_group()
            size = dist.distributed_c10d._get_default_group().size()
            a.note("FSDP2 default mesh -> virtual GPUs")
            return init_device_mesh("cuda", mesh_shape=(size,), mesh_dim_names=mesh_dim_names)

        return _init_default_mesh

    for owner in (init, module):
        for name, make in (("_get_device_from_mesh", device_from_mesh), ("_init_default_mesh", default_mesh)):
            if getattr(getattr(owner, name, None), "_vdk_virtual", False):
                continue  # replaced already (the module is _fsdp_init's importer a second time)
            a.replace(owner, name, make)
            getattr(owner, name)._vdk_virtual = True


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
            gpus = installed()
            device = gpus.device(0) if gpus else CPU
            inputs, kwargs = moved((inputs, kwargs), device)
            return self.module(*inputs, **kwargs)

        return forward

    a.replace(DataParallel, "__init__", make)
    a.replace(DataParallel, "forward", forward)
