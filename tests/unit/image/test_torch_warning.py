"""When requirements.txt pulls torch and its CUDA wheels into the dependency layer because the base
lacks them, the build says so once, with the size, before uploading, and suggests a PyTorch base."""

from __future__ import annotations

import os

import pytest

from tests.support.wheels import make_wheel
from vdk.plugin.ml_training.image.build_progress import BAR_THRESHOLD
from vdk.plugin.ml_training.image.torch_warning import is_torch_stack
from vdk.plugin.ml_training.image.torch_warning import layer_notice
from vdk.plugin.ml_training.image.torch_warning import layer_warning
from vdk.plugin.ml_training.job import load_job_spec

pytestmark = pytest.mark.slow
TORCH_BYTES, CUBLAS_BYTES = 3_000_000, 5_000_000


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """torch as on Linux, in miniature: it depends on an NVIDIA CUDA wheel; random bytes keep the
    sizes what they say when compressed."""
    d = tmp_path_factory.mktemp("cuda-wheelhouse")
    make_wheel(
        d,
        "torch",
        "2.13.0",
        requires=("nvidia-fake-cublas-cu13",),
        files={"torch/lib/libtorch.so": os.urandom(TORCH_BYTES)},
    )
    make_wheel(d, "nvidia-fake-cublas-cu13", "13.0.0", files={"nvidia/cublas/libcublas.so": os.urandom(CUBLAS_BYTES)})
    make_wheel(d, "tinydep", "1.0")
    return d


def job_on(tmp_path, base_image: str, wheelhouse, name: str):
    job = tmp_path / name
    job.mkdir()
    (job / "config.ini").write_text(f"[job]\ntype = ml-training\n[ml-training]\nbase_image = {base_image}\n")
    (job / "train.py").write_text("if __name__ == '__main__':\n    import torch\n")
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntorch\ntinydep\n")
    return load_job_spec(job)


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
