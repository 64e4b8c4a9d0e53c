"""The dependency layer: real uv resolving hand-made wheels from a local directory (no index)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import re
import tarfile
import time

import pytest

from tests.support.jobs import write_job
from tests.support.wheels import make_sdist
from tests.support.wheels import make_source
from tests.support.wheels import make_wheel
from tests.support.wheels import wheel_of_installed
from vdk.plugin.ml_training.dependencies import cache_entries
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_errors import DependencyError
from vdk.plugin.ml_training.image.build_errors import NoWheelError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import StderrProgress
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

PYTORCH_BASE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """A package index in a directory: a fake torch (with a CUDA-ish dependency) in two versions,
    torchvision builds for each, a package with a console script, a pure-Python package published as source only
    (antlr4-python3-runtime, which Hydra needs; tinysrc, a setup.py without pyproject.toml) with setuptools to build
    them."""
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
    make_source(d, "antlr4-python3-runtime", "4.9.3")
    wheel_of_installed(d, "setuptools")
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


def test_base_packages_are_left_out_and_the_rest_matches_the_base_torch(tmp_path, wheelhouse):
    spec = job_with(tmp_path, wheelhouse, "torchvision\ntorch-addon\ntinydep\n")
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())

    # torch-addon 1.0 is the build for the base's torch 2.13.0 (2.0 would need torch 2.14);
    # torch, torchvision (the base has both) and the CUDA package only torch needs are not installed.
    assert layer.packages == (("helperdep", "2.0"), ("tinydep", "1.0"), ("torch-addon", "1.0"))
    assert not layer.from_cache and layer.has_scripts
    members = layer_members(layer.blob)
    names = set(members)
    assert "opt/vdk-ml/deps/torch_addon/__init__.py" in names
    assert "opt/vdk-ml/deps/tinydep/__init__.py" in names
    assert not any(
        n.startswith(("opt/vdk-ml/deps/torch/", "opt/vdk-ml/deps/torchvision", "opt/vdk-ml/deps/nvidia")) for n in names
    )
    assert "opt/vdk-ml/deps/.lock" not in names  # uv's lock of its target directory is no file of a package
    script = members["opt/vdk-ml/deps/bin/tiny"][1]
    assert script.startswith(b"#!/usr/bin/env python\n")  # not this machine's interpreter
    assert members["opt/vdk-ml/deps/bin/tiny"][0].mode == 0o755


def test_unchanged_requirements_come_from_the_cache(tmp_path, wheelhouse, monkeypatch):
    spec = job_with(tmp_path, wheelhouse, "tinydep\n")
    info = base_info(spec)
    first = dependency_layer.dependency_layer(spec, info, Progress())

    def no_uv(*args, **kwargs):
        raise AssertionError("uv must not run for unchanged requirements")

    monkeypatch.setattr(uv_install, "install", no_uv)
    again = dependency_layer.dependency_layer(spec, info, Progress())
    assert again.from_cache and again.blob.digest == first.blob.digest and again.packages == first.packages
    assert dependency_layer.cached_layer(spec, info).packages == (
        ("helperdep", "2.0"),
        ("tinydep", "1.0"),
    )
    planned = plan_image(spec, "registry.example.com/ml", audit.collect(spec.job_dir)).layers[0]
    assert (
        planned.name == "dependencies" and "requirements.txt, cached: 2 packages, " in planned.detail
    )  # the dry run says so
    # Another base with the same Python, platform and torch (or the same tag re-pushed): reused.
    devel = job_with(
        tmp_path, wheelhouse, "tinydep\n", base_image="pytorch/pytorch:2.13.0-cuda12.8-cudnn9-devel", name="devel"
    )
    assert dependency_layer.dependency_layer(devel, base_info(devel), Progress()).blob.digest == first.blob.digest
    newer_python = dataclasses.replace(spec, base_python_version="3.12")
    with pytest.raises(AssertionError, match="must not run"):
        dependency_layer.dependency_layer(newer_python, base_info(newer_python), Progress())  # another Python: rebuilt


def test_layers_unused_for_a_month_are_pruned(tmp_path, wheelhouse):
    spec = job_with(tmp_path, wheelhouse, "tinydep\n")
    old = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    entry = old.blob.path.parent
    cache_entries.release_all()  # the command that built it has ended (while it runs, no prune takes it)
    month_ago = time.time() - 31 * 86400
    os.utime(entry / "layer.json", (month_ago, month_ago))
    other = job_with(tmp_path, wheelhouse, "helperdep\n", name="other")
    dependency_layer.dependency_layer(other, base_info(other), Progress())  # a new build prunes
    assert not entry.exists()


def test_same_requirements_give_the_same_layer_on_another_machine(tmp_path, wheelhouse, monkeypatch):
    spec = job_with(tmp_path, wheelhouse, "tinydep\ntorch-addon\n")
    info = base_info(spec)
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache-a"))
    a = dependency_layer.dependency_layer(spec, info, Progress())
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache-b"))
    b = dependency_layer.dependency_layer(spec, info, Progress())
    assert not b.from_cache and a.blob.digest == b.blob.digest


def test_a_layer_another_command_built_meanwhile_is_taken_and_never_removed_under_it(tmp_path, wheelhouse, monkeypatch):
    """Two deploys (two terminals, two test workers) build the same layer at once: the one that finishes second
    takes the first one's entry as it is, which the first still reads to push its files; a refresh replaces an
    entry in one step."""
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    spec = job_with(tmp_path, wheelhouse, "tinydep\n")
    info = base_info(spec)
    first = dependency_layer.dependency_layer(spec, info, Progress())  # the other command's, finished meanwhile
    entry = first.blob.path.parent
    inodes = (entry.stat().st_ino, first.blob.path.stat().st_ino)
    load = dependency_layer._load
    looked = []

    def missed_at_first(*args):  # this command looked before the other one's entry was there
        looked.append(args)
        return None if len(looked) == 1 else load(*args)

    monkeypatch.setattr(dependency_layer, "_load", missed_at_first)
    second = dependency_layer.dependency_layer(spec, info, Progress())
    assert len(looked) == 2  # it built, and then found the other one's entry
    assert second.blob.path == first.blob.path and second.blob.digest == first.blob.digest
    assert (entry.stat().st_ino, first.blob.path.stat().st_ino) == inodes  # the same files, never removed

    refreshed = dependency_layer.dependency_layer(spec, info, Progress(), refresh=True)
    assert refreshed.blob.digest == first.blob.digest and refreshed.blob.path.exists()
    assert entry.stat().st_ino != inodes[0] and not refreshed.from_cache
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no scratch directory left beside it


def test_a_pure_python_source_distribution_is_built_into_the_layer(tmp_path, wheelhouse):
    spec = job_with(tmp_path, wheelhouse, "antlr4-python3-runtime==4.9.3\ntinysrc\n", base_image="python:3.11-slim")
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert layer.packages == (("antlr4-python3-runtime", "4.9.3"), ("tinysrc", "1.0"))
    members = layer_members(layer.blob)
    wheel = next(
        data for name, (_, data) in members.items() if name.endswith("antlr4_python3_runtime-4.9.3.dist-info/WHEEL")
    )
    assert b"Tag: py3-none-any" in wheel


def test_an_unknown_package_is_a_clear_error(tmp_path, wheelhouse):
    spec = job_with(tmp_path, wheelhouse, "no-such-package-anywhere\n", base_image="python:3.11")
    with pytest.raises(DependencyError) as caught:
        dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert "no-such-package-anywhere" in caught.value.problem
    assert not isinstance(caught.value, NoWheelError)


def test_nvml_binding_is_copied_into_the_layer_of_a_gpu_job_without_an_index(tmp_path, wheelhouse):
    from importlib import metadata

    version = metadata.version("nvidia-ml-py")
    gpu = job_with(tmp_path / "gpu", wheelhouse, "tinydep\n", gpus="1")
    layer = dependency_layer.dependency_layer(gpu, base_info(gpu), Progress())
    assert ("nvidia-ml-py", version) in layer.packages and ("tinydep", "1.0") in layer.packages
    names = set(layer_members(layer.blob))
    assert "opt/vdk-ml/deps/pynvml.py" in names
    assert f"opt/vdk-ml/deps/nvidia_ml_py-{version}.dist-info/METADATA" in names
    # a GPU job without requirements.txt gets a layer of the binding alone
    files = {"train.py": "if __name__ == '__main__':\n    pass\n"}
    bare = load_job_spec(write_job(tmp_path / "bare", "job", ml=f"base_image = {PYTORCH_BASE}\n", files=files))
    alone = dependency_layer.dependency_layer(bare, base_info(bare), Progress())
    assert alone.packages == (("nvidia-ml-py", version),)
    cpu = load_job_spec(
        write_job(tmp_path / "cpu", "job", ml=f"base_image = {PYTORCH_BASE}\ngpus_per_node = 0\n", files=files)
    )
    assert dependency_layer.dependency_layer(cpu, base_info(cpu), Progress()) is None


def test_a_build_says_what_uv_does_and_then_built_or_reused_truthfully(tmp_path, wheelhouse, monkeypatch):
    spec = job_with(tmp_path, wheelhouse, "tinydep\n")
    info = base_info(spec)
    shown = io.StringIO()
    dependency_layer.dependency_layer(spec, info, StderrProgress(shown))
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("Dependencies: installing requirements.txt for Python 3.11")
    assert "  dependencies: resolving requirements.txt" in lines
    assert [line for line in lines if line.startswith("  dependencies: resolved 2 packages in ")]
    assert [line for line in lines if line.startswith("  dependencies: installed 2 packages in ")]
    assert re.fullmatch(r"Dependencies: 2 packages, [\d.]+ [KMG]?B compressed, built in [\d.]+ s", lines[-1]), lines[-1]

    # taken from the cache later in the same command (the build after the pre-flight check): built, not reused
    again = io.StringIO()
    dependency_layer.dependency_layer(spec, info, StderrProgress(again))
    assert " ago by this command (its pre-flight check)" in again.getvalue()
    assert "unchanged" not in again.getvalue() and "reused" not in again.getvalue()

    # another command (a later deploy): reused, with its age
    monkeypatch.setattr(dependency_layer, "_built_here", {})
    later = io.StringIO()
    dependency_layer.dependency_layer(spec, info, StderrProgress(later))
    assert "reused: built " in later.getvalue()
    assert " ago for the same requirements.txt, package indexes and Python" in later.getvalue()


def test_another_package_index_builds_a_new_layer_not_the_cached_one(tmp_path, monkeypatch):
    """The same requirements.txt with uv pointed at another directory of wheels (UV_FIND_LINKS, as pip's
    find-links reaches uv): a new layer from it, and the first one reused, truthfully, once uv points back."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    for version in ("1.0", "2.0"):
        make_wheel(tmp_path / f"files-{version}", "timmy", version)
    files = {"train.py": "pass\n", "requirements.txt": "--no-index\ntimmy\n"}
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = 0\n"  # a CPU job: no NVML binding beside timmy
    spec = load_job_spec(write_job(tmp_path, "job", ml=ml, files=files))
    info = base_info(spec)
    layers = {}
    for version in ("1.0", "2.0"):
        monkeypatch.setenv("UV_FIND_LINKS", str(tmp_path / f"files-{version}"))
        layers[version] = dependency_layer.dependency_layer(spec, info, Progress())
        assert layers[version].packages == (("timmy", version),) and not layers[version].from_cache
    assert layers["1.0"].cache_key != layers["2.0"].cache_key
    monkeypatch.setattr(dependency_layer, "_built_here", {})  # a later command
    monkeypatch.setenv("UV_FIND_LINKS", str(tmp_path / "files-1.0"))
    shown = io.StringIO()
    again = dependency_layer.dependency_layer(spec, info, StderrProgress(shown))
    assert again.from_cache and again.packages == (("timmy", "1.0"),)
    assert "reused: built " in shown.getvalue() and "package indexes" in shown.getvalue()
