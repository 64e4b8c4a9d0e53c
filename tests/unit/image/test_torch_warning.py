"""The torch warning's words, without a build: which packages are the torch stack, how the warning adds up
their sizes, and that the whole warning is said once per job and dependency set, then in one line.
(A real build that warns before uploading: tests/integration/image/test_torch_warning_build.py.)"""

from __future__ import annotations

from vdk.plugin.ml_training.image.build_progress import BAR_THRESHOLD
from vdk.plugin.ml_training.image.torch_warning import is_torch_stack
from vdk.plugin.ml_training.image.torch_warning import layer_notice
from vdk.plugin.ml_training.image.torch_warning import layer_warning


def test_which_packages_are_the_torch_stack_and_how_the_warning_adds_up():
    assert all(map(is_torch_stack, ["torch", "Triton", "nvidia-cublas-cu12", "nvidia_nccl_cu13", "cuda-bindings"]))
    assert not any(map(is_torch_stack, ["torchvision", "numpy", "transformers", "nvidia-ml-py"]))
    packages = (("nvidia-cudnn-cu13", "9.13"), ("numpy", "2.1"), ("triton", "3.7"))
    sizes = {"nvidia-cudnn-cu13": 900_000_000, "triton": 400_000_000, "numpy": 60_000_000}
    text = layer_warning(packages, sizes, BAR_THRESHOLD, "registry.example.com/debian:12")
    assert text.startswith("the dependency layer carries 2 CUDA/compiler wheels (nvidia-*, triton): 1.3 GB installed")
    assert layer_warning((("numpy", "2.1"),), sizes, 1, "x") is None


def test_the_whole_warning_is_said_once_per_job_and_dependency_set_then_in_one_line(tmp_path):
    packages = (("torch", "2.13.0"), ("nvidia-cudnn-cu13", "9.13"))
    sizes = {"torch": 900_000_000, "nvidia-cudnn-cu13": 1_800_000_000}
    entry = tmp_path / "deps" / "key"  # the layer's cache entry
    entry.mkdir(parents=True)
    first = layer_notice(packages, sizes, 2_000_000_000, "debian:12", entry, "mnist")
    assert first.startswith("warning: the dependency layer carries torch 2.13.0") and len(first) > 300
    again = layer_notice(packages, sizes, 2_000_000_000, "debian:12", entry, "mnist")
    assert again == (
        "note: the dependency layer carries 2 torch/CUDA wheels (2.7 GB installed), as said the first time; a PyTorch "
        "base (`base_image = pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime` (the default)) leaves them out"
    )
    # another job with the same dependencies is told in full, once
    assert layer_notice(packages, sizes, 2_000_000_000, "debian:12", entry, "bert").startswith("warning:")
    # without a cache entry (nowhere to remember it), always in full; nothing to say of a layer without torch
    assert layer_notice(packages, sizes, 1, "debian:12", None, "mnist").startswith("warning:")
    assert layer_notice((("numpy", "2.1"),), sizes, 1, "debian:12", entry, "mnist") is None
