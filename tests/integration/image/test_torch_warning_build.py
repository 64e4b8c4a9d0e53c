"""When requirements.txt pulls torch and its CUDA wheels into the dependency layer because the base
lacks them, the build says so once, with the size, before uploading, and suggests a PyTorch base."""

from __future__ import annotations

import io
import os
from importlib import metadata

import pytest

from tests.support.wheels import make_wheel
from vdk.plugin.ml_training.image import StderrProgress
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

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


def job_on(tmp_path, base_image: str, wheelhouse, name: str, gpus: int = 1):
    job = tmp_path / name
    job.mkdir()
    ml = f"base_image = {base_image}\ngpus_per_node = {gpus}\n"
    (job / "config.ini").write_text(f"[job]\ntype = ml-training\n[ml-training]\n{ml}")
    (job / "train.py").write_text("if __name__ == '__main__':\n    import torch\n")
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntorch\ntinydep\n")
    return load_job_spec(job)


def test_a_base_without_torch_gets_one_warning_with_the_size_before_anything_is_uploaded(
    tmp_path, registry, local_bases, wheelhouse
):
    base = local_bases.debian
    spec = job_on(tmp_path, base, wheelhouse, "torch-job", gpus=0)  # the layer's size is torch's alone
    provenance = audit.collect(spec.job_dir)
    dry = plan_image(spec, f"{registry.host}/ml", provenance).render()
    assert f"warning: requirements.txt asks for torch, which base image {base} does not have" in dry

    shown = io.StringIO()
    image = build_and_push(spec, f"{registry.host}/ml", provenance, progress=StderrProgress(shown))
    assert {"torch", "nvidia-fake-cublas-cu13", "tinydep"} == {name for name, _ in image.dependencies}
    lines = shown.getvalue().splitlines()
    warnings = [line for line in lines if "torch" in line and line.startswith("warning:")]
    assert len(warnings) == 1, lines  # once
    warning = warnings[0]
    assert warning.startswith(
        "warning: the dependency layer carries torch 2.13.0 and 1 CUDA/compiler wheels (nvidia-*, triton): 8.0 MB "
        f"installed, 8.0 MB compressed, because base image {base} does not have them."
    )
    assert "set `base_image = pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime` (the default)" in warning
    uploads = [i for i, line in enumerate(lines) if line.startswith(("Pushing to", "  uploading"))]
    assert uploads and lines.index(warning) < min(uploads)  # before uploading
    assert any("uploading dependencies layer" in line for line in lines)  # a layer over BAR_THRESHOLD
    # Once built, the dry run knows the layer and says it with its size.
    again = plan_image(spec, f"{registry.host}/ml", provenance).render()
    assert "warning: the dependency layer carries torch 2.13.0 and 1 CUDA/compiler wheels" in again
    # The next build of the job with the same dependencies says it in one line.
    shown = io.StringIO()
    build_and_push(spec, f"{registry.host}/ml", provenance, progress=StderrProgress(shown))
    said = [line for line in shown.getvalue().splitlines() if "torch" in line]
    assert not [line for line in said if line.startswith("warning:")], said
    assert [line for line in said if line.startswith("note: the dependency layer carries 2 torch/CUDA wheels")]


def test_a_base_with_torch_gets_no_warning_and_no_torch(tmp_path, registry, local_bases, wheelhouse):
    spec = job_on(tmp_path, local_bases.torch_dist_packages, wheelhouse, "torch-base-job")
    shown = io.StringIO()
    image = build_and_push(spec, f"{registry.host}/ml", audit.collect(spec.job_dir), progress=StderrProgress(shown))
    # torch is the base's, so its CUDA wheel is not needed; a GPU job gets the GPU sampler's NVML binding
    assert image.dependencies == (("nvidia-ml-py", metadata.version("nvidia-ml-py")), ("tinydep", "1.0"))
    assert "warning" not in shown.getvalue()
