"""`vdk run --container`'s engine and container: which engine is used, what is said when there is none,
and the container a run starts (the pods' command, environment and working directory, the plan's layout)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.container import ContainerStarter
from vdk.plugin.ml_training.local.container import inherited_env
from vdk.plugin.ml_training.local.engine import ContainerEngine
from vdk.plugin.ml_training.local.engine import find_engine
from vdk.plugin.ml_training.local.plan import FORK
from vdk.plugin.ml_training.local.plan import full_plan
from vdk.plugin.ml_training.local.plan import smoke_plan
from vdk.plugin.ml_training.runtime import protocol


def _programs(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        program = directory / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    return directory


def test_podman_first_then_docker_then_what_the_setting_names(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "both", "podman", "docker")))
    assert find_engine().command == ("podman",)
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "docker-only", "docker")))
    engine = find_engine(None, "--network host --ulimit nofile=1024:1024")
    assert (engine.command, engine.kind, engine.run_options) == (
        ("docker",),
        "docker",
        ("--network", "host", "--ulimit", "nofile=1024:1024"),
    )
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "custom", "podman-remote", "nerdctl")))
    assert find_engine("podman-remote --connection lab").kind == "podman"
    assert find_engine("nerdctl --namespace ml").command == ("nerdctl", "--namespace", "ml")


def test_without_an_engine_the_error_names_both_and_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "none")))
    with pytest.raises(MLTrainingError) as e:
        find_engine()
    assert "podman or docker, and neither is installed" in e.value.problem
    assert "install podman" in e.value.fix and "VDK_ML_TRAINING_CONTAINER_ENGINE" in e.value.fix
    with pytest.raises(MLTrainingError) as e:
        find_engine("podman")
    assert "VDK_ML_TRAINING_CONTAINER_ENGINE is `podman`, but `podman` is not installed" in e.value.problem


def test_vdk_run_container_without_an_engine_stops_before_building(tmp_path, monkeypatch, isolated_environment):
    job = write_job(tmp_path, "no-engine", ml={"gpus_per_node": "0"})
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "none")))
    result = CliEntryBasedTestRunner(plugin).invoke(["run", "--container", str(job)])
    assert result.exit_code != 0
    assert "neither is installed" in str(result.exception) and "install podman" in str(result.exception)
    monkeypatch.setenv("VDK_ML_TRAINING_RUN_MODE", "container")  # the same, from the environment
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert "neither is installed" in str(result.exception)


@pytest.mark.skipif(shutil.which("docker") is None, reason="the docker command line is not installed")
def test_an_engine_that_does_not_answer_says_so(tmp_path):
    engine = find_engine("docker")
    try:
        engine.check()
    except MLTrainingError as e:  # here: the docker command line without a daemon
        assert e.problem.startswith("the container engine `docker` does not work: ")
        assert "start it (for Docker: its daemon), or use podman" in e.fix
    else:
        pytest.skip("this machine's Docker daemon answers")


def _starter(spec, kind: str = "podman", gpus: int = 0) -> ContainerStarter:
    engine = ContainerEngine((kind, "--storage-driver", "vfs"), kind, ("--network", "host"))
    return ContainerStarter(engine, layout.JobImage("localhost/vdk-ml-training/demo:abc", "python3"), spec, gpus, "c1")


def test_a_smoke_run_container_is_started_as_the_pods_are(tmp_path, monkeypatch):
    monkeypatch.setenv(protocol.PROGRESS_SECONDS, "7")
    monkeypatch.setenv("HOME", "/home/someone")  # the shell's own environment stays out of the image
    job = write_job(
        tmp_path,
        "demo",
        ml={"gpus_per_node": "0", "nodes": "2", "procs_per_node": "2", "memory": "2Gi", "args": "--epochs 1"},
        env={"PYTHONPATH": "/extra", "MY_SETTING": "a b"},
    )
    spec = load_job_spec(job)
    plan = smoke_plan(spec, FORK, inherited=inherited_env(0))
    run_dir = tmp_path / "run"
    env = {**plan.env, protocol.RUN_DIR: str(run_dir)}
    argv = _starter(spec).argv(plan, run_dir, 23456, env)
    assert argv[:8] == ["podman", "--storage-driver", "vfs", "run", "--rm", "--name", "c1", "--label"]
    at = argv.index("--entrypoint")
    assert argv[at + 1 : at + 3] == ["python3", "localhost/vdk-ml-training/demo:abc"]
    # the image's launcher with the smoke run's single-node layout, ranks forked as on this machine
    assert argv[at + 3 :] == [
        "-m",
        "torch.distributed.run",
        *plan.torchrun_flags(run_dir, 23456),
        "--run-path",
        "--start-method=fork",
        layout.BOOTSTRAP_PATH,
        "train.py",
        "--epochs",
        "1",
    ]
    assert "--nproc-per-node=2" in argv and "--master-port=23456" in argv
    options = argv[:at]
    assert options[options.index("--workdir") + 1] == layout.JOB_DIR
    assert options[options.index("--shm-size") + 1] == str(1 << 30)  # shm_size: half of memory
    assert f"{run_dir}:{run_dir}:z" in options and "--pull=never" in options and "--network" in options
    passed = dict(options[i + 1].split("=", 1) for i, a in enumerate(options) if a == "-e")
    assert passed["PYTHONPATH"] == f"{layout.PYTHONPATH}:/extra"  # as the pods have it
    assert passed["MY_SETTING"] == "a b" and passed[protocol.PROGRESS_SECONDS] == "7"
    assert passed[protocol.MODE] == protocol.SMOKE and passed[protocol.RUN_DIR] == str(run_dir)
    assert passed["CUDA_VISIBLE_DEVICES"] == "" and "HOME" not in passed
    assert "--gpus" not in options and "--device" not in options


def test_a_full_run_passes_every_gpu_in(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    spec = load_job_spec(write_job(tmp_path, "demo", ml={"gpus_per_node": "2"}))
    plan = full_plan(spec, 2, inherited=inherited_env(2))
    podman = _starter(spec, "podman", gpus=2).argv(plan, tmp_path, 1, dict(plan.env))
    assert podman[podman.index("--device") + 1] == "nvidia.com/gpu=all"
    docker = _starter(spec, "docker", gpus=2).argv(plan, tmp_path, 1, dict(plan.env))
    assert docker[docker.index("--gpus") + 1] == "all"
    passed = dict(docker[i + 1].split("=", 1) for i, a in enumerate(docker) if a == "-e")
    assert passed["CUDA_VISIBLE_DEVICES"] == "0,1" and passed[protocol.MODE] == protocol.FULL
    # fresh interpreters, as the pods start them: the image's launch command
    at = docker.index("--entrypoint")
    command = [docker[at + 1], *docker[at + 3 :]]  # the entrypoint, then the arguments after the image
    assert command == layout.launch_command(spec, "python3", plan.torchrun_flags(tmp_path, 1))
