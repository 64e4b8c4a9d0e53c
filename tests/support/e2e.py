"""What the end-to-end tests (functional_tests/) share: the examples as jobs for the local cluster, the
environment the real `vdk` runs in there, and its verbs (`vdk deploy --build-only`, `--dry-run`)."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.debian_base import RUN_OPTIONS
from tests.support.debian_base import cache_dir
from tests.support.fixtures import MACHINE_SETTINGS
from tests.support.registry import podman_command

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLES = PROJECT / "examples"
# The CPU torch wheel this machine's pip finds (/opt/wheels): requirements.txt puts it in the image.
TORCH_REQUIREMENT = "torch==2.13.0"


def example_job(
    example: str,
    parent: Path,
    ml: dict[str, str],
    env: dict[str, str] | None = None,
    requirements: list[str] | None = None,
    name: str | None = None,
) -> Path:
    """A copy of examples/<example> whose code is unchanged, with `ml` set in [ml-training] (the rest of
    the example's config.ini kept), `env` added to [ml-training.env], and requirements.txt replaced."""
    source = EXAMPLES / example
    job = parent / (name or example)
    shutil.copytree(source, job, ignore=shutil.ignore_patterns("config.ini", "requirements.txt", "outputs"))
    config = configparser.ConfigParser(interpolation=None)
    config.optionxform = str  # environment variable names keep their case
    config.read(source / "config.ini")
    for key, value in ml.items():
        config["ml-training"][key] = value
    if env:
        if not config.has_section("ml-training.env"):
            config.add_section("ml-training.env")
        for key, value in env.items():
            config["ml-training.env"][key] = value
    with open(job / "config.ini", "w") as f:
        config.write(f)
    if requirements is not None:
        (job / "requirements.txt").write_text("".join(f"{line}\n" for line in requirements))
    return job


def vdk_environment(registry_host: str, podman_root: Path, tmp: Path) -> dict[str, str]:
    """The environment `vdk` runs with in the end-to-end tests: no settings of this machine, images pushed
    to the test registry, a dependency cache kept between test sessions (a torch layer takes half a
    minute to make), and podman (its storage that of the tests) as the container engine."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in MACHINE_SETTINGS and (not k.startswith("VDK_ML_TRAINING_") or k == "VDK_ML_TRAINING_RUNS_DIR")
    }
    engine, engine_env = podman_command(podman_root)
    docker_config = tmp / "docker-config"  # no credentials (podman wants the file to exist when it is named)
    docker_config.mkdir(parents=True, exist_ok=True)
    (docker_config / "config.json").write_text('{"auths": {}}')
    env.update(
        VDK_ML_TRAINING_REGISTRY=f"{registry_host}/e2e",
        VDK_ML_TRAINING_CACHE_DIR=str(cache_dir() / "vdk-cache"),
        VDK_ML_TRAINING_CONTAINER_ENGINE=" ".join(engine),
        VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS=" ".join(RUN_OPTIONS),
        XDG_RUNTIME_DIR=engine_env["XDG_RUNTIME_DIR"],
        DOCKER_CONFIG=str(docker_config),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
        KUBECONFIG=str(tmp / "no-kubeconfig"),
    )
    return env


def vdk(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """The installed `vdk` in a new process, as a user runs it."""
    command = [str(Path(sys.executable).with_name("vdk")), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def build_only(job: Path, env: dict[str, str], *options: str) -> dict:
    """`vdk deploy -p JOB --build-only -o json`: the pushed image (reference, tag_reference, ...)."""
    done = vdk("deploy", "-p", str(job), "--build-only", "-o", "json", *options, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def dry_run(job: Path, backend: str, env: dict[str, str]) -> list[dict]:
    """`vdk deploy -p JOB --dry-run --backend BACKEND`: the manifests, as applied to a cluster."""
    done = vdk("deploy", "-p", str(job), "--dry-run", "--backend", backend, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [m for m in yaml.safe_load_all(done.stdout) if m]
