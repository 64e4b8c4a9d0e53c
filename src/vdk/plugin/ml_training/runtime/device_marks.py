"""Which device a tensor on the virtual GPUs is on: a mark on the tensor (a virtual GPU's index, or the
CPU), and the errors CUDA raises when devices do not go together. The rules that set and check the
marks are the device mode's (device_mode.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from vdk.plugin.ml_training.runtime.virtual_gpu.devices import cuda_error

TAG = "_vdk_device"  # a tensor's device: a virtual GPU's index, or CPU_TAG; absent when not known
CPU_TAG = -1
Tensor = torch.Tensor


def _name(tag: int) -> str:
    return "cpu" if tag == CPU_TAG else f"cuda:{tag}"


def mismatch(first: int, second: int) -> Exception:
    return cuda_error(
        RuntimeError,
        f"Expected all tensors to be on the same device, but found at least two devices, {_name(first)} and "
        f"{_name(second)}!",
    )


def numpy_of_gpu_tensor(tag: int) -> Exception:
    return cuda_error(
        TypeError,
        f"can't convert {_name(tag)} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
        "memory first.",
    )


def mark(value: Any, tag: int | None) -> None:
    """Mark `value` (a tensor, or a tuple/list of them) as being on `tag`; None marks nothing."""
    if tag is None:
        return
    if isinstance(value, Tensor):
        try:
            value.__dict__[TAG] = tag
        except (AttributeError, TypeError):  # a tensor subclass without a __dict__
            pass
    elif isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, Tensor):
                try:
                    item.__dict__[TAG] = tag
                except (AttributeError, TypeError):
                    pass


def mark_tree(value: Any, tag: int | None, only_unmarked: bool = False) -> None:
    """Mark every tensor in nested dicts, lists, tuples and modules; tag None removes the marks."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, Tensor):
            marks = getattr(item, "__dict__", {})
            if only_unmarked and TAG in marks:
                continue
            if tag is None:
                marks.pop(TAG, None)
            else:
                mark(item, tag)
        elif id(item) in seen:
            continue
        elif isinstance(item, Mapping):
            seen.add(id(item))
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            seen.add(id(item))
            stack.extend(item)
        elif isinstance(item, torch.nn.Module):
            seen.add(id(item))
            stack.extend(item.parameters())
            stack.extend(item.buffers())


def with_device_suffix(text: str, suffix: str) -> str:
    """`tensor([1., 2.], grad_fn=...)` -> `tensor([1., 2.], device='cuda:0', grad_fn=...)`, as torch prints it."""
    start = text.find("tensor(")
    if start < 0 or not text.endswith(")"):
        return text
    depth = 0
    for i in range(start + len("tensor("), len(text) - 1):
        char = text[i]
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == "," and depth == 0:
            return f"{text[:i]}, {suffix}{text[i:]}"
    return f"{text[:-1]}, {suffix})"
