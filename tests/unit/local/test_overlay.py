"""The dependency overlay's decisions without uv: when a job gets none, what a cached one is keyed by, and how
it goes on the ranks' path (the installs themselves: tests/integration/local/test_overlay_uv.py)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.dependencies.install_errors import DiskFullError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local import overlay
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan


def spec_with(tmp_path, requirements: str | None, ml: str = ""):
    files = {"train.py": "print()\n", **({"requirements.txt": requirements} if requirements is not None else {})}
    return load_job_spec(write_job(tmp_path, "job", ml=ml, files=files))


def never(text: str) -> None:
    raise AssertionError(f"nothing is installed, nothing is said: {text}")


def test_a_job_gets_no_overlay_without_requirements_beyond_what_vdk_s_environment_has(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    assert overlay.prepare(spec_with(tmp_path / "a", None), never) is None
    assert overlay.prepare(spec_with(tmp_path / "b", "# nothing\n\n"), never) is None
    assert overlay.prepare(spec_with(tmp_path / "c", "torch==2.13.0  # vdk's environment has it\n"), never) is None
    opted_out = spec_with(tmp_path / "d", "numpy\n", ml="requirements_overlay = false\n")
    assert overlay.prepare(opted_out, never) is None
    assert not (tmp_path / "cache").exists()


def test_unchanged_requirements_take_the_overlay_from_the_cache_without_uv(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    spec = spec_with(tmp_path, "numpy==2.3.0\n")
    indexes = uv_install.index_fingerprint(spec.job_dir)
    key = overlay.cache_key((spec.job_dir / "requirements.txt").read_bytes(), overlay.this_interpreter(), indexes)
    entry = tmp_path / "cache" / overlay.OVERLAYS / key
    (entry / overlay.TARGET).mkdir(parents=True)
    (entry / overlay.META).write_text(json.dumps({"packages": [["numpy", "2.3.0"]]}))
    os.utime(entry / overlay.META, (1, 1))
    found = overlay.prepare(spec, never)  # uv would start a process: the unit tests' guard refuses it
    assert found is not None and found.from_cache and found.packages == (("numpy", "2.3.0"),)
    assert found.path == entry / overlay.TARGET
    assert (entry / overlay.META).stat().st_mtime > 1  # used now: pruning keeps it


def test_the_key_is_the_requirements_and_what_the_packages_are_installed_for():
    this = overlay.this_interpreter()
    assert ("torch", this.pins[0][1]) == this.pins[0] and "+" not in this.pins[0][1]  # torch's public version
    assert overlay.cache_key(b"numpy\n", this) == overlay.cache_key(b"numpy\n", this)
    assert overlay.cache_key(b"numpy\n", this) != overlay.cache_key(b"numpy==2\n", this)
    other_torch = uv_install.Target(provides=this.provides, pins=(("torch", "0.1"),))
    assert overlay.cache_key(b"numpy\n", this) != overlay.cache_key(b"numpy\n", other_torch)
    assert overlay.cache_key(b"numpy\n", this, "a") != overlay.cache_key(b"numpy\n", this, "b")  # the indexes


def test_another_index_setting_is_another_overlay(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("UV_DEFAULT_INDEX", raising=False)
    spec = spec_with(tmp_path, "numpy==2.3.0\n")
    before = uv_install.index_fingerprint(spec.job_dir)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://user:s3cret@mirror.example.com/simple")
    after = uv_install.index_fingerprint(spec.job_dir)
    monkeypatch.setenv("PIP_INDEX_URL", "https://other.example.com/simple")  # uv's own setting wins over pip's
    assert uv_install.index_fingerprint(spec.job_dir) == after
    monkeypatch.delenv("UV_DEFAULT_INDEX")  # now pip's reaches uv
    assert len({before, after, uv_install.index_fingerprint(spec.job_dir)}) == 3


def test_the_overlay_goes_first_on_the_ranks_path_of_smoke_and_full_runs(tmp_path):
    packages = tmp_path / "packages"
    (packages / "bin").mkdir(parents=True)
    deps = overlay.Overlay(packages, (("numpy", "2.3.0"),), from_cache=True)
    spec = spec_with(tmp_path, "numpy\n")
    inherited = {"PYTHONPATH": "/mine", "PATH": "/usr/bin"}
    for plan in (smoke_plan(spec, inherited=inherited, overlay=deps), full_plan(spec, 0, inherited, overlay=deps)):
        assert plan.env["PYTHONPATH"] == f"{packages}{os.pathsep}/mine"
        assert plan.env["PATH"] == f"{packages / 'bin'}{os.pathsep}/usr/bin"  # its console scripts
        assert f"requirements.txt: 1 package in the run's overlay (from the cache): {packages}" in plan.notes
    without = smoke_plan(spec, inherited=inherited)
    assert without.env["PYTHONPATH"] == "/mine" and not any("overlay" in n for n in without.notes)


def raising(error: Exception):
    def install(*args, **kwargs):
        raise error

    return install


def test_a_full_disk_under_the_overlay_s_own_writes_is_said_as_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "cache" / "meta.json"))
    monkeypatch.setattr(uv_install, "install", raising(full))
    with pytest.raises(DiskFullError) as caught:
        overlay.prepare(spec_with(tmp_path, "somepackage==1.0\n"), note=lambda text: None)
    assert "the requirements themselves are not at fault" in caught.value.problem
    monkeypatch.setattr(uv_install, "install", raising(PermissionError(errno.EACCES, "denied")))
    with pytest.raises(PermissionError):  # not a full disk: as it was
        overlay.prepare(spec_with(tmp_path / "b", "somepackage==1.0\n"), note=lambda text: None)
