"""The dependency layer: real uv resolving hand-made wheels from a local directory (no index)."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from tests.support.jobs import write_job
from tests.support.wheels import make_sdist
from tests.support.wheels import make_wheel
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import load_job_spec

PYTORCH_BASE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """A package index in a directory: a fake torch (with a CUDA-ish dependency) in two versions,
    torchvision builds for each, a package with a console script, and an sdist-only package."""
    d = tmp_path_factory.mktemp("wheelhouse")
    make_wheel(d, "torch", "2.13.0", requires=("nvidia-fake-cublas",))
    make_wheel(d, "torch", "2.14.0", requires=("nvidia-fake-cublas",))
    make_wheel(d, "nvidia-fake-cublas", "13.0.0")
    make_wheel(d, "torchvision", "0.28.0", requires=("torch==2.13.0",))
    make_wheel(d, "torch-addon", "1.0", requires=("torch==2.13.0",))
    make_wheel(d, "torch-addon", "2.0", requires=("torch==2.14.0",))
    make_wheel(d, "tinydep", "1.0", requires=("helperdep>=2",), console_script="tiny")
    make_wheel(d, "helperdep", "2.0")
    make_sdist(d, "tinysrc", "1.0")
    return d


def job_with(tmp_path, wheelhouse, requirements, base_image=PYTORCH_BASE, name="job", gpus="0"):
    files = {
        "train.py": "if __name__ == '__main__':\n    pass\n",
        "requirements.txt": f"--no-index\n--find-links {wheelhouse}\n{requirements}",
    }
    # a CPU job: a job that asks for GPUs also gets the NVML binding (test_nvml_binding_* below)
    ml = f"base_image = {base_image}\ngpus_per_node = {gpus}\n"
    return load_job_spec(write_job(tmp_path, name, ml=ml, files=files))


def layer_members(blob):
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.path.read_bytes()))) as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


def test_no_requirements_no_layer(tmp_path, wheelhouse):
    spec = job_with(tmp_path, wheelhouse, "")
    (spec.job_dir / "requirements.txt").write_text("# nothing yet\n\n")
    assert dependency_layer.dependency_layer(spec, base_info(spec), Progress()) is None


# --- the NVML binding of the GPU sampler ------------------------------------------------------------------


def test_nvml_binding_is_added_for_a_job_that_asks_for_gpus_and_samples_them(tmp_path, wheelhouse):
    from importlib import metadata

    wanted = (f"nvidia-ml-py=={metadata.version('nvidia-ml-py')}",)
    gpu = job_with(tmp_path / "gpu", wheelhouse, "tinydep\n", gpus="8")
    assert dependency_layer.extra_requirements(gpu, base_info(gpu)) == wanted
    mig = job_with(tmp_path / "mig", wheelhouse, "tinydep\n", gpus="1g.10gb")
    assert dependency_layer.extra_requirements(mig, base_info(mig)) == wanted
    cpu = job_with(tmp_path / "cpu", wheelhouse, "tinydep\n", gpus="0")
    assert dependency_layer.extra_requirements(cpu, base_info(cpu)) == ()


def test_nvml_binding_is_left_to_the_base_or_to_requirements_that_name_it(tmp_path, wheelhouse):
    named = job_with(tmp_path / "named", wheelhouse, "pynvml>=11 ; sys_platform == 'linux'\n", gpus="1")
    assert dependency_layer.extra_requirements(named, base_info(named)) == ()
    files = {"train.py": "if __name__ == '__main__':\n    pass\n"}
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = 1\nbase_provides = nvidia-ml-py\n"
    provided = load_job_spec(write_job(tmp_path / "provided", "job", ml=ml, files=files))
    assert dependency_layer.extra_requirements(provided, base_info(provided)) == ()
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = 1\ngpu_sample_period = 0\n"
    unsampled = load_job_spec(write_job(tmp_path / "unsampled", "job", ml=ml, files=files))
    assert dependency_layer.extra_requirements(unsampled, base_info(unsampled)) == ()
