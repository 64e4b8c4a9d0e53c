"""The dependency overlay's decisions without uv: when a job gets none, what a cached one is keyed by, and how
it goes on the ranks' path (the installs themselves: tests/integration/local/test_overlay_uv.py)."""

from __future__ import annotations

import errno
import json
import os
import sys

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
    spec, entry = cached_overlay(tmp_path, monkeypatch)  # last used long ago
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


# --- a cache entry that several commands use at once (two terminals, two test workers, a sweep's trials) -----------


def cached_overlay(tmp_path, monkeypatch):
    """A job and the overlay cached for it, last used long ago (a prune would take it)."""
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    spec = spec_with(tmp_path, "numpy==2.3.0\n")
    indexes = uv_install.index_fingerprint(spec.job_dir)
    key = overlay.cache_key((spec.job_dir / "requirements.txt").read_bytes(), overlay.this_interpreter(), indexes)
    entry = tmp_path / "cache" / overlay.OVERLAYS / key
    (entry / overlay.TARGET).mkdir(parents=True)
    (entry / overlay.META).write_text(json.dumps({"packages": [["numpy", "2.3.0"]]}))
    os.utime(entry / overlay.META, (1, 1))
    return spec, entry


def test_a_prune_between_a_run_s_lookup_and_its_ranks_leaves_the_overlay_it_took(tmp_path, monkeypatch):
    spec, entry = cached_overlay(tmp_path, monkeypatch)
    load = overlay._load

    def load_then_another_command_prunes(entry):
        found = load(entry)
        overlay.prune(max_age_days=0)  # another run's prune, right after this one's lookup
        return found

    monkeypatch.setattr(overlay, "_load", load_then_another_command_prunes)
    found = overlay.prepare(spec, never)
    assert found is not None and found.from_cache
    monkeypatch.setattr(overlay, "_load", load)
    assert overlay.prune(max_age_days=0) == []  # nor later, while this run's ranks import from it
    assert found.path.is_dir()


def test_an_overlay_that_vanishes_before_a_run_takes_it_is_installed_again(tmp_path, monkeypatch):
    spec, entry = cached_overlay(tmp_path, monkeypatch)
    real_utime = os.utime

    def gone_first(path, *args, **kwargs):  # another command's prune finished just before this one's touch
        if str(path) == str(entry / overlay.META) and entry.exists():
            os.replace(entry, tmp_path / "pruned")
        return real_utime(path, *args, **kwargs)

    monkeypatch.setattr(os, "utime", gone_first)
    installed = []

    def install(requirements, packages_dir, *args, **kwargs):  # uv itself: the unit tests' guard refuses a process
        installed.append(packages_dir)
        packages_dir.mkdir(parents=True)

    monkeypatch.setattr(uv_install, "install", install)
    notes = []
    found = overlay.prepare(spec, notes.append)
    assert found is not None and not found.from_cache and found.path == entry / overlay.TARGET
    assert len(installed) == 1 and "installing" in notes[0] and (entry / overlay.META).is_file()


def test_an_overlay_used_after_a_prune_looked_at_its_age_is_kept(tmp_path, monkeypatch):
    spec, entry = cached_overlay(tmp_path, monkeypatch)
    meta = entry / overlay.META
    real_stat = type(meta).stat

    def stat_then_a_run_takes_it(path, *args, **kwargs):
        seen = real_stat(path, *args, **kwargs)
        if path == meta and sys._getframe(1).f_code.co_name == "prune_unused":
            os.utime(meta)  # the prune found it old; a run takes it (touches it) right then
        return seen

    monkeypatch.setattr(type(meta), "stat", stat_then_a_run_takes_it)
    assert overlay.prune(max_age_days=1) == []
    monkeypatch.setattr(type(meta), "stat", real_stat)
    assert entry.is_dir() and meta.is_file()
    os.utime(meta, (1, 1))  # unused since: pruned
    assert overlay.prune(max_age_days=1) == [entry] and not entry.parent.joinpath(entry.name).exists()
    assert [p.name for p in entry.parent.iterdir()] == []  # nothing left beside it either
