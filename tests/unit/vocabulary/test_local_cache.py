"""Where vdk caches on this machine: the variable, else XDG's cache home, else ~/.cache."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.vocabulary import local_cache


def test_the_cache_root_is_the_variable_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv(local_cache.CACHE_DIR, str(tmp_path / "mine"))
    assert local_cache.cache_root() == tmp_path / "mine"
    monkeypatch.delenv(local_cache.CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert local_cache.cache_root() == tmp_path / "xdg" / "vdk-ml-training"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert local_cache.cache_root() == Path(tmp_path / "home" / ".cache" / "vdk-ml-training")
