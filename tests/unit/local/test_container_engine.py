"""The container engine of `vdk run --container`, chosen without starting it: podman first, then docker,
then what the setting names; without one, the error names both and how to get one; the limits a
restricted host gives the container, left alone where the user set them or the host can raise its own,
and the user's options after the host's. (An engine that does not answer:
tests/integration/local/test_container_engine_start.py.)"""

from __future__ import annotations

import pytest

from tests.support.programs import path_with
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.host_limits import HostLimits
from vdk.plugin.ml_training.local.container_engine import ContainerEngine
from vdk.plugin.ml_training.local.container_engine import adapted_options
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


# A container engine's default limits on a host that cannot raise its own: the container gets this machine's
# (--ulimit), unless the user's run options set limits; a host that can raise them is left to the engine.

RESTRICTED = HostLimits(open_files=20000, processes=32768, can_raise=False)


def test_a_restricted_host_gives_the_container_its_own_limits():
    assert adapted_options((), RESTRICTED) == ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")
    assert adapted_options(("--network", "host"), RESTRICTED)[:2] == ("--ulimit", "nofile=20000:20000")
    unlimited = HostLimits(open_files=1 << 20, processes=None, can_raise=False)
    assert adapted_options((), unlimited) == ("--ulimit", "nofile=1048576:1048576")


def test_the_user_s_limits_and_a_host_that_can_raise_its_own_are_left_alone():
    assert adapted_options(("--ulimit", "nofile=1024:1024"), RESTRICTED) == ()
    assert adapted_options(("--ulimit=nproc=64",), RESTRICTED) == ()
    assert adapted_options((), HostLimits(20000, 32768, can_raise=True)) == ()


def test_the_user_s_options_come_after_the_host_s_so_they_win():
    engine = ContainerEngine(("podman",), "podman", ("--network", "host"), ("--ulimit", "nofile=20000:20000"))
    assert engine.run_options == ("--ulimit", "nofile=20000:20000", "--network", "host")
