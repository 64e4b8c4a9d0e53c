"""The container engine of `vdk run --container`: which one is used, and what is said when there is none
or it does not answer."""

from __future__ import annotations

import pytest

from tests.support.programs import path_with
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local.container_engine import find_engine


def test_podman_first_then_docker_then_what_the_setting_names(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path / "both", "podman", "docker"))
    assert find_engine().command == ("podman",)
    monkeypatch.setenv("PATH", path_with(tmp_path / "docker-only", "docker"))
    engine = find_engine(None, "--network host --ulimit nofile=1024:1024")
    assert (engine.command, engine.kind, engine.run_options) == (
        ("docker",),
        "docker",
        ("--network", "host", "--ulimit", "nofile=1024:1024"),
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "custom", "podman-remote", "nerdctl"))
    assert find_engine("podman-remote --connection lab").kind == "podman"
    assert find_engine("nerdctl --namespace ml").command == ("nerdctl", "--namespace", "ml")


def test_without_an_engine_the_error_names_both_and_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path / "none"))
    with pytest.raises(MLTrainingError) as e:
        find_engine()
    assert "podman or docker, and neither is installed" in e.value.problem
    assert "install podman" in e.value.fix and "VDK_ML_TRAINING_CONTAINER_ENGINE" in e.value.fix
    with pytest.raises(MLTrainingError) as e:
        find_engine("podman")
    assert "VDK_ML_TRAINING_CONTAINER_ENGINE is `podman`, but `podman` is not installed" in e.value.problem
