"""The container a `vdk run --container` starts: the pods' command, environment and working directory, with
the local plan's layout, and this machine's GPUs for a full run."""

from __future__ import annotations

from tests.support.jobs import write_job
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.container import ContainerStarter
from vdk.plugin.ml_training.local.container import inherited_env
from vdk.plugin.ml_training.local.container_engine import ContainerEngine
from vdk.plugin.ml_training.local.launch_plan import FORK
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.runtime import protocol


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
        layout.LAUNCHER_MODULE,
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


def test_a_second_start_s_container_sees_what_the_first_wrote(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "demo", ml={"gpus_per_node": "0"}))
    plan = smoke_plan(spec, FORK, inherited=inherited_env(0))
    first_dir = tmp_path / "run"
    second_dir = first_dir / "restart-x"
    env = {**plan.env, protocol.RUN_DIR: str(second_dir), protocol.FIRST_START_DIR: str(first_dir)}
    starter = _starter(spec)
    argv = starter.argv(plan, second_dir, 1, env)
    # the first start's run directory holds the second's, the outputs both work in and the frameworks' directories
    assert f"{first_dir}:{first_dir}:z" in argv and f"{second_dir}:{second_dir}:z" not in argv
    passed = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    assert passed[protocol.RUN_DIR] == str(second_dir)
