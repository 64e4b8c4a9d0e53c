"""Fixtures shared by the tests: local runs keep their files in a temporary directory; a real
registry process, a busybox base and the Debian-built bases in it for the image and deploy tests."""

from __future__ import annotations

import shutil

import pytest
from base_images import LocalBases
from image_jobs import build_rootfs
from image_jobs import push_base
from image_servers import Registry
from image_servers import have_registry

from vdk.plugin.ml_training.local import launcher


@pytest.fixture(autouse=True)
def local_runs_in_a_temporary_directory(tmp_path_factory, monkeypatch):
    """Run directories of local runs (failed ones stay a day, with a FIFO while running) go to a
    temporary directory, not the user's $TMPDIR/vdk-ml-training-<uid>: through the environment for
    `vdk` processes, and directly for in-process runs of tests that clean the environment."""
    runs = tmp_path_factory.mktemp("local-runs")
    monkeypatch.setenv(launcher.RUNS_DIR_ENV, str(runs))
    monkeypatch.setattr(launcher, "runs_dir", lambda: runs)
    return runs


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    if not have_registry():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    server = Registry(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def podman_root(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    return tmp_path_factory.mktemp("podman")


@pytest.fixture(scope="session")
def base_image(registry, podman_root, tmp_path_factory) -> str:
    """`127.0.0.1:PORT/base/busybox:1`: busybox + a fake python, pushed by podman."""
    tarball = build_rootfs(tmp_path_factory.mktemp("base") / "rootfs")
    return push_base(podman_root, tarball, f"{registry.host}/base/busybox:1")


@pytest.fixture(scope="session")
def local_bases(registry, podman_root) -> LocalBases:
    """Debian-built bases (python3 only, python only, a venv, torch in dist-packages), each built and
    pushed to the registry when a test first asks for it; see tests/image/base_images.py."""
    return LocalBases(podman_root, registry.host)
