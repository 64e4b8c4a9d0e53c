"""Fixtures of the image tests: a real registry, a busybox base image in it, job directories."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vdk.plugin.ml_training.image import sources
from image_jobs import write_job


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch, tmp_path):
    """No credentials, CA bundles, caches or timestamps of the machine leak into a test."""
    for name in ("REGISTRY_AUTH_FILE", "SOURCE_DATE_EPOCH", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg-runtime"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def runtime_package(monkeypatch, tmp_path_factory):
    """The plugin's runtime package as it ships in images. Until runtime/ exists in the source tree,
    a placeholder package with the same layout stands in for it (tests only)."""
    real = sources.runtime_package_dir()
    if (real / "runtime" / "bootstrap.py").is_file():
        return real
    fake = tmp_path_factory.getbasetemp() / "fake-runtime" / "ml_training"
    if not fake.exists():
        (fake / "runtime").mkdir(parents=True)
        (fake / "__init__.py").write_text('"""vdk-ml-training (test placeholder)."""\n')
        (fake / "runtime" / "__init__.py").write_text("")
        (fake / "runtime" / "bootstrap.py").write_text("print('bootstrap placeholder')\n")
    monkeypatch.setattr(sources, "runtime_package_dir", lambda: fake)
    return fake


@pytest.fixture
def job_dir(tmp_path, base_image) -> Path:
    return write_job(tmp_path / "train-job", base_image)
