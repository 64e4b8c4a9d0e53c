"""A full disk named as such, from uv's words or from an OSError; anything else left alone. What vdk added to a job's
requirements is read back by its mark (a failure to install it blames vdk's pin, not the job)."""

from __future__ import annotations

import errno
import re

import pytest

from vdk.plugin.ml_training.dependencies import install_errors
from vdk.plugin.ml_training.dependencies.install_errors import ADDED_MARK
from vdk.plugin.ml_training.dependencies.install_errors import DiskFullError
from vdk.plugin.ml_training.dependencies.install_errors import added_requirements


def test_uv_s_words_for_a_full_disk_name_the_fuller_cache(tmp_path):
    said = "error: Failed to write to `/x/torch.whl`\n  Caused by: No space left on device (os error 28)"
    with pytest.raises(DiskFullError) as caught:
        install_errors.raise_if_uv_said(said, {"UV_CACHE_DIR": str(tmp_path / "uv")}, tmp_path / "cache")
    assert "the disk is full" in caught.value.problem and re.search(r"\d+(\.\d)? [KMGT]?B free", caught.value.problem)
    assert "UV_CACHE_DIR" in caught.value.fix
    install_errors.raise_if_uv_said("error: No solution found when resolving dependencies", {}, tmp_path)


def test_only_enospc_and_edquot_are_a_full_disk(tmp_path):
    for number in (errno.ENOSPC, errno.EDQUOT):
        with pytest.raises(DiskFullError) as caught:
            install_errors.raise_if_full(OSError(number, "full", str(tmp_path / "layer.tar.gz")), tmp_path)
        assert str(tmp_path / "layer.tar.gz") in caught.value.problem
    install_errors.raise_if_full(OSError(errno.EACCES, "denied"), tmp_path)  # not a full disk: the caller re-raises


def test_uv_s_cache_is_where_uv_keeps_it(tmp_path):
    assert install_errors.uv_cache_dir({"UV_CACHE_DIR": "/c/uv"}) == "/c/uv"
    assert install_errors.uv_cache_dir({"XDG_CACHE_HOME": "/xdg"}) == "/xdg/uv"


def test_the_requirements_vdk_added_are_read_back_by_their_mark_and_nothing_else(tmp_path):
    path = tmp_path / "sweep-requirements.txt"
    path.write_text(
        "# requirements.txt sha256 00\n-r /job/requirements.txt\n"
        f"optuna==4.5.0  {ADDED_MARK} the sweep's client\nGrpc_IO.Tools==1.0  {ADDED_MARK} why\n"
        "torch==2.5.0  # the user's own comment\n"
    )
    assert added_requirements(path) == {
        "optuna": ("optuna==4.5.0", "the sweep's client"),
        "grpc-io-tools": ("Grpc_IO.Tools==1.0", "why"),
    }
    assert added_requirements(tmp_path / "missing.txt") == {}
