"""`scaled_dot_product_attention` of DTensors (tensor parallelism that keeps q, k, v as DTensors) on the
virtual GPUs. On a GPU, DTensor runs the flash or memory-efficient CUDA kernel on each rank's shard of the
heads (or of the batch); on the CPU it picks the CPU flash kernel, for which DTensor has no sharding rule
("Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy
registered"), and the math kernel mixes in plain tensors (the causal mask) that DTensor refuses. So the
attention runs as on a GPU: each rank's shard through the CPU kernel, the result a DTensor sharded as q.
Other shardings (of the sequence: context parallelism) go to torch as they are.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from vdk.plugin.ml_training.runtime.patching import Adaptations

PER_SHARD = "attention of DTensors -> per shard (as the CUDA kernels)"
_SHARDABLE_DIMS = (0, 1)  # batch and heads of (batch, heads, length, embedding)


def install(a: Adaptations) -> None:
    import torch.nn.functional as F

    def make(original):
        def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
            qkv = _qkv(args, kwargs)
            if qkv is None or all(type(t) is torch.Tensor for t in qkv):
                return original(*args, **kwargs)
            placements = per_shard(qkv, args, kwargs)
            if placements is None:
                return original(*args, **kwargs)
            a.note(PER_SHARD)
            return _on_shards(original, qkv, placements, args, kwargs)

        return scaled_dot_product_attention

    a.replace(F, "scaled_dot_product_attention", make)


def _qkv(args: tuple, kwargs: dict) -> tuple | None:
    names = ("query", "key", "value")
    values = [*args[:3], *(kwargs.get(n) for n in names[len(args[:3]) :])]
    return tuple(values) if all(v is not None for v in values) else None


def per_shard(qkv: tuple, args: tuple, kwargs: dict) -> tuple | None:
    """The placements of q, k and v when attention can run on each rank's shard as the CUDA kernels do
    (the same mesh and placements, each Replicate or a shard of the batch or the heads; no mask); else None."""
    tensor_module = sys.modules.get("torch.distributed.tensor")
    DTensor = getattr(tensor_module, "DTensor", None)
    if DTensor is None or not all(isinstance(t, DTensor) for t in qkv):
        return None
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    if mask is not None:
        return None
    q, k, v = qkv
    if not (q.device_mesh == k.device_mesh == v.device_mesh) or not (q.placements == k.placements == v.placements):
        return None
    for placement in q.placements:
        if placement.is_replicate():
            continue
        if not placement.is_shard() or placement.dim not in _SHARDABLE_DIMS or q.dim() != 4:
            return None
    return q.placements


def _on_shards(original: Any, qkv: tuple, placements: tuple, args: tuple, kwargs: dict) -> Any:
    from torch.distributed.tensor import DTensor

    q, k, v = qkv
    local_args = (q.to_local(), k.to_local(), v.to_local(), *args[3:])
    local_kwargs = {n: x for n, x in kwargs.items() if n not in ("query", "key", "value")}
    out = original(*local_args, **local_kwargs)
    shape = torch.Size((*q.shape[:-1], v.shape[-1]))
    stride = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        stride[i] = stride[i + 1] * shape[i + 1]
    return DTensor.from_local(out, q.device_mesh, placements, run_check=False, shape=shape, stride=tuple(stride))
