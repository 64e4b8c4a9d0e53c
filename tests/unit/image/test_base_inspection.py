"""What inspection finds in a base image's root filesystem, without a registry: the interpreter (a Python 2
is passed over, one off the PATH is started by its absolute path, a versioned one alone on the PATH), its
version (from the standard library, then the environment), the packages on the PYTHONPATH and in a venv;
no interpreter at all is a clear error; findings survive the cache; what is known of a base without
contacting it. (Bases read from the real registry: tests/integration/image/test_base_inspection_registry.py.)"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from tests.support.base_images import layout_tarball
from tests.support.jobs import job_on
from vdk.plugin.ml_training.image import base_facts_cache
from vdk.plugin.ml_training.image import base_inspection
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_errors import BaseImageError
from vdk.plugin.ml_training.image.rootfs import RootFS
from vdk.plugin.ml_training.image.rootfs import read_layer

# --- analysis of a root filesystem (no registry) ------------------------------------------


def fs_of(tmp_path, files: dict) -> RootFS:
    fs = RootFS()
    with open(layout_tarball(tmp_path / "layer.tar", files), "rb") as blob:
        fs.apply(read_layer(io.BufferedReader(blob), base_inspection.wanted))
    return fs


def facts(tmp_path, files: dict, env: dict[str, str] | None = None, user: str = ""):
    config = {"config": {"Env": [f"{k}={v}" for k, v in (env or {"PATH": "/usr/bin:/bin"}).items()], "User": user}}
    return base_inspection.analyse(fs_of(tmp_path, files), config, "sha256:" + "0" * 64)


EXE = (b"\x7fELF", 0o755)


def metadata(name, version):
    return f"Name: {name}\nVersion: {version}\n".encode()


def test_a_python_that_is_python_2_is_passed_over(tmp_path):
    found = facts(
        tmp_path,
        {
            "usr/bin/python2.7": EXE,
            "usr/bin/python": "->python2.7",
            "usr/bin/python3.6": EXE,
            "usr/bin/python3": "->python3.6",
        },
    )
    assert (found.python, found.python_version) == ("python3", "3.6")
    assert "`python` (/usr/bin/python) is Python 2.7" in found.python_reason


def test_an_interpreter_off_the_path_is_started_by_its_absolute_path(tmp_path):
    found = facts(tmp_path, {"opt/conda/bin/python3.12": EXE, "opt/conda/bin/python": "->python3.12"})
    assert found.python == "/opt/conda/bin/python" and found.python_version == "3.12"
    assert "not on the image's PATH" in found.python_reason


def test_only_a_versioned_interpreter_on_the_path(tmp_path):
    found = facts(tmp_path, {"usr/bin/python3.10": EXE, "usr/bin/python3.12": EXE})
    assert (found.python, found.python_path) == ("python3.12", "/usr/bin/python3.12")


def test_the_version_from_the_standard_library_then_from_the_environment(tmp_path):
    stdlib = facts(tmp_path, {"usr/bin/python3": EXE, "usr/lib/python3.13/os.py": b""})
    assert (stdlib.python_version, stdlib.version_reason) == ("3.13", "its standard library /usr/lib/python3.13")
    (tmp_path / "env").mkdir()
    env = facts(tmp_path / "env", {"usr/local/bin/python": EXE}, {"PATH": "/usr/local/bin", "PYTHON_VERSION": "3.12.7"})
    assert (env.python_version, env.version_reason) == ("3.12", "PYTHON_VERSION in the image's environment")
    (tmp_path / "none").mkdir()
    unknown = facts(tmp_path / "none", {"usr/bin/python": EXE})
    assert unknown.python == "python" and unknown.python_version is None
    spec = job_on(tmp_path, "registry.example.com/base:1")
    with pytest.raises(BaseImageError) as caught:
        base_info(spec, unknown)
    assert "cannot tell which Python version" in caught.value.problem and "/usr/bin/python" in caught.value.problem
    assert "base_python_version = 3.11" in caught.value.fix
    assert base_info(dataclasses.replace(spec, base_python_version="3.10"), unknown).python_version == "3.10"


def test_packages_on_the_pythonpath_and_in_a_venv_with_system_site_packages(tmp_path):
    found = facts(
        tmp_path,
        {
            "usr/bin/python3.11": EXE,
            "usr/bin/python3": "->python3.11",
            "usr/lib/python3/dist-packages/debpkg-1.0.egg-info/PKG-INFO": metadata("debpkg", "1.0"),
            "venv/bin/python": "->/usr/bin/python3",
            "venv/pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n",
            "venv/lib/python3.11/site-packages/Own_Pkg-2.0.dist-info/METADATA": metadata("Own_Pkg", "2.0"),
            "libs/extra-3.0.dist-info/METADATA": b"",  # metadata cut: the directory name tells
        },
        {"PATH": "/venv/bin:/usr/bin", "PYTHONPATH": "/libs"},
    )
    assert found.python == "python" and "a virtual environment" in found.python_reason
    assert found.distributions == (("debpkg", "1.0"), ("extra", "3.0"), ("own-pkg", "2.0"))


def test_no_interpreter_at_all_is_a_clear_error(tmp_path):
    found = facts(tmp_path, {"bin/sh": EXE, "etc/os-release": b"ID=alpine\nVERSION_ID=3.20.0\n"})
    assert found.python is None and found.wheel_platform == "x86_64-unknown-linux-musl"
    with pytest.raises(BaseImageError) as caught:
        base_info(job_on(tmp_path, "registry.example.com/base:1"), found)
    assert "has no Python interpreter the builder could find: no `python` or `python3` on its PATH" in str(caught.value)
    assert "base_python = /path/to/python" in caught.value.fix


def test_findings_survive_the_cache(tmp_path):
    found = facts(tmp_path, {"usr/bin/python3.11": EXE, "usr/bin/python3": "->python3.11"})
    base_facts_cache.store(found)
    assert base_facts_cache.cached(found.digest) == found
    path = tmp_path / "cache" / "bases" / f"{found.digest[7:]}.json"
    stale = json.loads(path.read_text())
    stale["format"] = "base-v0"
    path.write_text(json.dumps(stale))
    assert base_facts_cache.cached(found.digest) is None  # findings of an older way of reading are read again


def test_what_is_known_of_a_base_without_contacting_it(tmp_path):
    """`vdk run`'s import check: the table, or what a build or dry run read before; plus base_provides."""
    table = base_facts_cache.known_provides(job_on(tmp_path / "a", "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"))
    assert table is not None and {"torch", "numpy", "pyyaml"} <= set(table)
    extra = base_facts_cache.known_provides(
        job_on(tmp_path / "b", "python:3.11-slim", extra="base_provides = Pillow\n")
    )
    assert extra == ("pillow",)
    unread = job_on(tmp_path / "c", "registry.example.com/ml/base:1", extra="base_provides = torch\n")
    assert base_facts_cache.known_provides(unread) is None  # never read: what it has is not known
    found = facts(
        tmp_path,
        {
            "usr/bin/python3.11": EXE,
            "usr/lib/python3/dist-packages/numpy-2.1.0.dist-info/METADATA": metadata("numpy", "2.1.0"),
        },
    )
    base_facts_cache.store(found)
    base_facts_cache.remember(unread.base_image, found.digest)
    assert base_facts_cache.known_provides(unread) == ("numpy", "torch")
    pinned = job_on(tmp_path / "d", f"registry.example.com/ml/base@{found.digest}")
    assert base_facts_cache.known_provides(pinned) == ("numpy",)
