"""Saying when the dependency layer is about to carry torch or CUDA wheels that the base lacks.

On Linux, `pip install torch` brings some 30 NVIDIA wheels with it: measured for torch 2.13, 2.7 GB
that every change of requirements.txt uploads and every node pulls, where a PyTorch base image has
them all already. Most often the user meant such a base; the build says so before uploading, in full once
per job and dependency set (a marker in the dependency layer's cache entry), then in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.base_facts import public_version
from vdk.plugin.ml_training.job import DEFAULT_BASE_IMAGE
from vdk.plugin.ml_training.vocabulary.human_units import size_text

# torch, its compiler and the CUDA runtime wheels it depends on (not NVML's small Python bindings).
_TORCH_STACK = re.compile(r"^(torch|triton|pytorch-triton(-.*)?|nvidia-(?!ml-py).*|cuda-.*)$")


def is_torch_stack(name: str) -> bool:
    return bool(_TORCH_STACK.match(canonicalize_name(name)))


def pytorch_base_for(torch_version: str | None) -> str:
    """The PyTorch base to suggest: the default one when its torch matches, else its family."""
    default_torch = DEFAULT_BASE_IMAGE.split(":", 1)[1].split("-", 1)[0]
    if torch_version is None or public_version(torch_version) == default_torch:
        return f"`base_image = {DEFAULT_BASE_IMAGE}` (the default)"
    return f"`base_image` to a pytorch/pytorch tag of torch {public_version(torch_version)}"


def carried(packages: tuple[tuple[str, str], ...], sizes: dict[str, int]) -> tuple[list[tuple[str, str]], int]:
    """The torch-stack distributions among `packages`, and their installed bytes."""
    stack = [(name, version) for name, version in packages if is_torch_stack(name)]
    return stack, sum(sizes.get(name, 0) for name, _ in stack)


def layer_warning(
    packages: tuple[tuple[str, str], ...], sizes: dict[str, int], compressed: int, base_image: str
) -> str | None:
    """What to say about a built dependency layer that carries torch or CUDA wheels; None if it does not."""
    stack, installed = carried(packages, sizes)
    if not stack:
        return None
    versions = dict(stack)
    others = len(stack) - (1 if "torch" in versions else 0)
    what = f"torch {versions['torch']}" if "torch" in versions else ""
    if others:
        what += f"{' and ' if what else ''}{others} CUDA/compiler wheels (nvidia-*, triton)"
    return (
        f"the dependency layer carries {what}: {size_text(installed)} installed, {size_text(compressed)} compressed, "
        "because "
        f"base image {base_image} does not have them. Every node pulls them, and every change of requirements.txt "
        f"uploads them again. A PyTorch base has them already: set {pytorch_base_for(versions.get('torch'))} "
        "in [ml-training], or use your platform's PyTorch image (requirements.txt may keep torch: what the base "
        "has is not installed again)"
    )


def layer_notice(
    packages: tuple[tuple[str, str], ...],
    sizes: dict[str, int],
    compressed: int,
    base_image: str,
    cache_entry: Path | None,
    job: str,
) -> str | None:
    """What a build says of a dependency layer that carries torch or CUDA wheels: the whole warning the first time
    for this job and dependency set (`cache_entry`: the layer's directory in the cache, where that is noted), a
    line after that; None if it carries none."""
    warning = layer_warning(packages, sizes, compressed, base_image)
    if warning is None:
        return None
    marker = cache_entry / f".warned-{job}" if cache_entry is not None else None
    if marker is not None and marker.exists():
        stack, installed = carried(packages, sizes)
        return (
            f"note: the dependency layer carries {len(stack)} torch/CUDA wheels ({size_text(installed)} installed), as "
            f"said the first time; a PyTorch base ({pytorch_base_for(dict(stack).get('torch'))}) leaves them out"
        )
    if marker is not None:
        try:
            marker.touch()
        except OSError:
            pass  # a read-only cache: the warning is said again next time
    return f"warning: {warning}"


def requirements_warning(names: Iterable[str], base: BaseInfo, base_image: str) -> str | None:
    """What a dry run says when the layer's requirements (canonical `names`) name torch (or CUDA wheels) the base
    does not have."""
    wanted = sorted(n for n in set(names) if is_torch_stack(n) and n not in base.provides)
    if not wanted:
        return None
    return (
        f"requirements.txt asks for {', '.join(wanted)}, which base image {base_image} does not have: the dependency "
        "layer will carry it, and on Linux torch brings its CUDA wheels (2.7 GB for torch 2.13). A PyTorch base has "
        f"them already: set {pytorch_base_for(None)} in [ml-training], or use your platform's PyTorch image"
    )
