"""`vdk run --container`: the smoke run inside the job's image, the one `vdk deploy` pushes, loaded into
podman without a registry. What it catches that the smoke run on this machine cannot: a module the
code imports that the image lacks (installed here, missing from requirements.txt). Its resume check runs in the
image too: the second start is a container of its own, in the directory the first one wrote."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support import teardown_crash
from tests.support.e2e import TORCH_REQUIREMENT
from tests.support.e2e import build_only
from tests.support.e2e import vdk
from tests.support.e2e import vdk_environment
from tests.support.jobs import write_job
from tests.support.registry import podman

from vdk.plugin.ml_training.local.container_engine import RUN_LABEL

pytestmark = pytest.mark.slow

# A training loop that needs PyYAML (installed where vdk runs: transformers requires it), and saves its model after
# every step: a restarted run goes on from it.
TRAIN_WITH_YAML = """import os
import torch
import yaml

if __name__ == "__main__":
    settings = yaml.safe_load("lr: 0.1\\nsteps: 3\\n")
    model = torch.nn.Linear(4, 1)
    if os.path.exists("model.pt"):
        model.load_state_dict(torch.load("model.pt"))
        print("going on from model.pt", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings["lr"])
    for _ in range(settings["steps"]):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        torch.save(model.state_dict(), "model.pt")
"""


@pytest.fixture(scope="module")
def env(registry, local_bases, podman_root, tmp_path_factory):
    environment = vdk_environment(registry.host, podman_root, tmp_path_factory.mktemp("container-env"))
    del environment["VDK_ML_TRAINING_REGISTRY"]  # a container run needs none
    return environment


def test_a_module_missing_from_requirements_fails_in_the_image_and_passes_once_listed(
    local_bases, registry, env, tmp_path
):
    job = write_job(
        tmp_path,
        "needs-yaml",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0", "smoke_steps": "2"},
        files={"train.py": TRAIN_WITH_YAML, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    # A base never read: the cache the tests share may know this one from a test that ran before (then a
    # plain `vdk run` already fails as --container does below), so this run has a cache of its own.
    never_read = {**env, "VDK_ML_TRAINING_CACHE_DIR": str(tmp_path / "new-cache")}
    here = vdk("run", str(job), env=never_read, timeout=300)
    assert here.returncode == 0, here.stdout + here.stderr  # this machine has PyYAML: the smoke run passes
    assert "is not in requirements.txt; it must come from the base image" in here.stdout + here.stderr

    # once the base is read, the import check knows the image lacks it: stopped before anything is built
    missing = vdk("run", "--container", str(job), env=env)
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0, output
    assert "train.py:3: `import yaml` needs PyYAML" in output and "smoke run" not in output, output
    assert "add `PyYAML==" in output and f"to {job / 'requirements.txt'}" in output, output
    # and in the image itself, where the import check is skipped, it fails as it would on the cluster
    unchecked = vdk("run", "--container", "--skip-import-check", str(job), env=env)
    output = unchecked.stdout + unchecked.stderr
    assert unchecked.returncode != 0, output
    assert "smoke run FAILED" in output and "No module named 'yaml'" in output, output
    assert f"add PyYAML to {job / 'requirements.txt'}: it provides `yaml` where vdk runs" in output, output

    (job / "requirements.txt").write_text(f"{TORCH_REQUIREMENT}\npyyaml\n")
    listed = vdk("run", str(job), env={**env, "VDK_ML_TRAINING_RUN_MODE": "container"})
    output = listed.stdout + listed.stderr
    assert listed.returncode == 0, output
    assert "smoke run PASSED" in output and "rank 0: 2 steps" in output, output
    # stopped after its 2 steps (the model of step 1 saved: the limit stops it inside the second), started again in
    # a container of its own: it read what the first one wrote
    assert "going on from model.pt" in output, output
    assert "resume: checkpoint at step 1 written by the script, resumed at step 1" in output, output
    # the very image deploy pushes: same digest
    pushed = build_only(job, {**env, "VDK_ML_TRAINING_REGISTRY": f"{registry.host}/e2e"}, "--skip-smoke")
    tag = pushed["tag_reference"].rsplit(":", 1)[1]
    assert f"in the job's image localhost/vdk-ml-training/needs-yaml:{tag} " in output, output
    assert f"({pushed['digest']}: the image `vdk deploy` pushes)" in output, output

    full = vdk("run", "--container", "--full", str(job), env=env)  # to completion, in the same image
    output = full.stdout + full.stderr
    assert full.returncode == 0, output
    assert "full run PASSED" in output and "rank 0: 3 steps" in output and "has this image already" in output


# Trains a step, says so, then hangs: only stopping it ends the run.
HANGS = """import time
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    print("stepped once", flush=True)
    time.sleep(600)
"""


# SIGINT and SIGHUP take SIGTERM's path in vdk (tests/integration/cli/test_interrupts_processes.py sends each to
# host runs); a container run costs close to a minute here (vfs storage copies the image's root filesystem).
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_stopping_vdk_stops_the_container(local_bases, podman_root, env, tmp_path, signal_name):
    """However vdk ends, the container goes: SIGKILL leaves vdk no handler to run, so the guard that holds
    the run's lifeline (local/container_guard.py) stops and removes it."""
    job = write_job(
        tmp_path,
        "hangs",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0", "smoke_steps": "5"},
        files={"train.py": HANGS, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("vdk")), "run", "--container", str(job)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if the tests run in the background
    )
    sig = getattr(signal, signal_name)
    output = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if "stepped once" in line:
                break
        assert _containers(podman_root), "".join(output)  # it runs in a container
        process.send_signal(sig)
        rest, _ = process.communicate(timeout=60)
        output.append(rest)
        gone = _gone(podman_root, 30)  # SIGKILL: the guard stops it (a grace of 5 s), then removes it
    finally:
        if process.poll() is None:
            process.kill()
        for name in _containers(podman_root):  # a failure here leaves nothing to the next test
            podman(podman_root, "rm", "-f", name, check=False)
    assert gone, "".join(output)  # nothing left running, nothing left behind
    if sig == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
        return
    assert process.returncode == 128 + sig
    out = "".join(output)
    assert f"smoke run interrupted by {signal_name}: every process of it was stopped" in out, out
    assert "Traceback" not in out


def _gone(podman_root, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _containers(podman_root):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _containers(podman_root) -> list[str]:
    listed = podman(podman_root, "ps", "-a", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}")
    return listed.stdout.split()


TRAIN = """import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
"""


def test_the_documented_defaults_work_here_and_an_engine_failure_is_named_as_such(local_bases, env, tmp_path):
    """Without the tests' `--ulimit` options: on a host that cannot raise its limits (this one, rootless podman,
    a container) the container gets this machine's own; an option the engine refuses is the engine's failure."""
    from vdk.plugin.ml_training.host_limits import host_limits

    job = write_job(
        tmp_path,
        "defaults",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0", "smoke_steps": "2"},
        files={"train.py": TRAIN, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    plain = {**env, "VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS": "--network host"}
    done = vdk("run", "--container", str(job), env=plain)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "smoke run PASSED" in output, output
    if not host_limits().can_raise:
        limits = " ".join(host_limits().ulimit_options())
        assert f"note: this machine's limits, which it cannot raise to podman's defaults: {limits}" in output, output

    refused = vdk(
        "run", "--container", str(job), env={**plain, "VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS": "--network nosuchnet"}
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "podman could not start the job's container" in output, output
    assert "unable to find network with name or ID nosuchnet" in output, output
    assert "VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS='--network host'" in output, output
    assert "torchrun failed before any rank started" not in output, output


def test_the_import_check_runs_again_once_the_base_is_read(local_bases, env, tmp_path):
    """A base never read: `vdk run` can only note that an undeclared import must come from it. Once --container
    has read the base, the check runs again, before anything is built."""
    job = write_job(
        tmp_path,
        "recheck",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0"},
        files={"train.py": TRAIN_WITH_YAML, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    fresh = {**env, "VDK_ML_TRAINING_CACHE_DIR": str(tmp_path / "fresh-cache")}  # nothing read of any base yet
    done = vdk("run", "--container", str(job), env=fresh)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "note: train.py:3: `import yaml` needs PyYAML" in output, output  # the first check: base unknown
    assert "recheck imports 1 module its image would not have" in output, output  # the second: base read
    assert "Dependencies:" not in output and "smoke run of" not in output, output  # before building anything


def test_ranks_that_finished_pass_in_the_image_whatever_their_teardown_does(local_bases, env, tmp_path):
    """Issue 40: in the image, where a smoke run's ranks are forked from the image's own torchrun (not vdk's agent),
    two DDP ranks on gloo that load a library whose destructor aborts the process at exit pass and are reported as
    ended, with what only a process's end writes written (tests/support/teardown_crash.py)."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    files = teardown_crash.job_files(tmp_path / "build", teardown_crash.DDP)
    job = write_job(
        tmp_path,
        "ends-in-image",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0", "procs_per_node": "2", "smoke_steps": "5"},
        env={"EVIDENCE_DIR": str(evidence)},
        files={**files, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    options = f"{env['VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS']} -v {evidence}:{evidence}"  # where the ranks write
    done = vdk("run", "--container", str(job), env={**env, "VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS": options})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "smoke run PASSED" in output and teardown_crash.TEARDOWN_ABORT not in output, output
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: 2 steps, last loss [-0-9.e]+, the script ended\n", output), output
        assert teardown_crash.left_over(evidence, f"rank-{rank}") == teardown_crash.LEFT_OVER
