"""Fixtures shared by the image and deploy tests: a real registry process and a busybox base in it."""
from __future__ import annotations

import shutil

import pytest
from image_jobs import build_rootfs
from image_jobs import push_base
from image_servers import have_registry
from image_servers import Registry


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
