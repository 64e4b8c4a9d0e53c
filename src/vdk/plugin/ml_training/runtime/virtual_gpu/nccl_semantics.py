"""What NCCL accepts and gloo, its stand-in on the virtual GPUs, does not, made to work as NCCL would:

- the single-tensor collectives (`all_gather_into_tensor`, `reduce_scatter_tensor` and their aliases) take
  the big tensor in any shape that holds `world_size` times the small one's elements (NCCL reads it as a
  flat buffer; Accelerate's `gather` passes a flat one), where gloo wants exactly `(world_size * n, ...)`;
- DDP's BF16 communication hooks, which DDP refuses without NCCL: an fp32 all-reduce does their work (the
  smoke run trains in full precision anyway).

Only for tensors the code put on a GPU (or whose device is not known): a CPU tensor goes to gloo on the
cluster too, and gets gloo's rules here.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from vdk.plugin.ml_training.runtime.device_marks import CPU_TAG
from vdk.plugin.ml_training.runtime.device_marks import TAG
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import with_arguments

Tensor = torch.Tensor
NCCL_SHAPES = "NCCL tensor shapes on gloo"
BF16_HOOK = "DDP bf16 hook -> fp32 all-reduce"
_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")  # the names DDP refuses without NCCL


def install(a: Adaptations) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    _tensor_shapes(a, dist)
    _bf16_hooks(a)


def _tensor_shapes(a: Adaptations, dist: Any) -> None:
    """all_gather_single / reduce_scatter_single (and what calls them) take NCCL's shapes."""
    c10d = dist.distributed_c10d

    def gathered(arguments: dict) -> None:
        for big, small in (("output_tensor", "input_tensor"), ("output", "input")):
            if big in arguments and small in arguments:
                arguments[big], arguments[small] = gloo_shapes(
                    a, arguments[big], arguments[small], arguments.get("group")
                )

    def scattered(arguments: dict) -> None:
        if "output" in arguments and "input" in arguments:
            arguments["input"], arguments["output"] = gloo_shapes(
                a, arguments["input"], arguments["output"], arguments.get("group")
            )

    names = {
        "all_gather_single": gathered,
        "all_gather_into_tensor": gathered,
        "_all_gather_base": gathered,
        "reduce_scatter_single": scattered,
        "reduce_scatter_tensor": scattered,
        "_reduce_scatter_base": scattered,
    }
    for name, change in names.items():
        for owner in (dist, c10d):
            a.replace(owner, name, functools.partial(with_arguments, change=change))


def gloo_shapes(a: Adaptations, big: Any, small: Any, group: Any) -> tuple[Any, Any]:
    """(big, small) as gloo takes them: big viewed as `(world_size * small.shape[0], *small.shape[1:])`
    (the same memory, so what gloo writes is where NCCL would have written it), small as 1-D if it is a
    scalar; unchanged when they are not NCCL's forms of one collective, or are CPU tensors."""
    if not isinstance(big, Tensor) or not isinstance(small, Tensor):
        return big, small
    if CPU_TAG in (big.__dict__.get(TAG), small.__dict__.get(TAG)):
        return big, small  # tensors of the CPU: gloo's rules hold on the cluster too
    try:
        import torch.distributed as dist

        if dist.get_backend(group) != "gloo":
            return big, small
        world = dist.get_world_size(group)
    except Exception:  # noqa: BLE001 - not in a group: the collective says so itself
        return big, small
    flat_small = small.reshape(1) if small.dim() == 0 and small.is_contiguous() else small
    wanted = (world * flat_small.shape[0], *flat_small.shape[1:]) if flat_small.dim() else ()
    if tuple(big.shape) == wanted or big.numel() != world * small.numel() or not big.is_contiguous():
        return big, flat_small
    a.note(NCCL_SHAPES)
    return big.view(wanted), flat_small


def _bf16_hooks(a: Adaptations) -> None:
    """DDP's BF16 compression hooks (NCCL only): an fp32 all-reduce, or the hook they wrap in fp32."""
    from torch.nn.parallel import DistributedDataParallel

    def register(original):
        def register_comm_hook(self, state, hook):
            if getattr(hook, "__name__", "") in _BF16_HOOKS:
                a.note(BF16_HOOK)
                hook = _fp32_hook(hook)
            return original(self, state, hook)

        return register_comm_hook

    a.replace(DistributedDataParallel, "register_comm_hook", register)


def _fp32_hook(hook: Any) -> Any:
    """bf16_compress_hook -> allreduce_hook; bf16_compress_wrapper(inner) -> inner."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if hook.__name__ == "bf16_compress_wrapper_hook":
        names = hook.__code__.co_freevars
        cells = hook.__closure__ or ()
        inner = dict(zip(names, (c.cell_contents for c in cells), strict=False)).get("hook")
        if callable(inner):
            return inner
    return default_hooks.allreduce_hook
