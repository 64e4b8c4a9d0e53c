"""`vdk deploy` against registries it cannot use (the real vdk CLI, the real registry behind a fault-injecting
proxy): a base whose registry name does not resolve stops the deploy at once, during the smoke run, with what to
set; a registry that never answers ends the pre-flight in bounded time, saying while it waits; a signal during
uploads that stall stops the deploy at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.support.jobs import write_job
from tests.support.registry import Fault
from tests.support.registry import FaultProxy
from tests.support.vdk_cli import vdk

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("isolated_environment")]

# Trains for a while: long enough that a remote check failing at once has a smoke run to stop.
TRAIN = """\
import time
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        time.sleep(20)
"""


def job(tmp_path, name, base_image):
    ml = f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 0\n"
    return write_job(tmp_path, name, ml=ml, files={"train.py": TRAIN})


def tags(registry, repository: str) -> list[str]:
    answer = requests.get(f"{registry.url}/v2/{repository}/tags/list", timeout=5)
    return [] if answer.status_code == 404 else answer.json().get("tags") or []


def test_a_base_whose_registry_name_does_not_resolve_stops_the_deploy_at_once(tmp_path, registry, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    path = job(tmp_path, "offline-job", "mirror.vdk-test.invalid/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime")
    started = time.monotonic()
    result = vdk("deploy", "-p", str(path), "--build-only")
    took = time.monotonic() - started
    assert result.exit_code == 1, result.stderr
    assert "smoke run stopped: the base image check failed" in result.stderr, result.stderr
    assert "the name mirror.vdk-test.invalid of registry mirror.vdk-test.invalid does not resolve" in result.stderr
    assert "Nothing was built or deployed." in result.stderr
    fix = result.stderr.split("Fix: ", 1)[1]
    assert "`base_image` in [ml-training] of config.ini (or VDK_ML_TRAINING_BASE_IMAGE)" in fix
    assert "mirror of Docker Hub" in fix and "docs/offline-registries.md" in fix
    assert "smoke run PASSED" not in result.stderr and "rank 0: 3 steps" not in result.stderr
    assert took < 60  # the smoke run alone sleeps 60 s: it was stopped
    assert tags(registry, "team/offline-job") == []


def test_a_registry_that_never_answers_ends_the_pre_flight_saying_what_it_waits_for(
    tmp_path, registry, base_image, monkeypatch
):
    proxy = FaultProxy(registry.port)
    try:
        proxy.faults = [Fault("POST", r"/blobs/uploads/", "hang", times=1000)]
        monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{proxy.host}/team")
        monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY_TIMEOUT", "3")
        path = job(tmp_path, "silent-job", base_image)
        result = vdk("deploy", "-p", str(path), "--build-only", "--skip-smoke")
    finally:
        proxy.stop()
    assert result.exit_code == 1
    stderr = result.stderr
    assert "Pre-flight: waiting for the registry check (" in stderr, stderr
    assert f"{proxy.host} accepts connections but did not answer (start an upload to team/silent-job) within 3 s" in (
        stderr
    )
    assert "(2 attempts in " in stderr and "Nothing was built or deployed." in stderr
    assert [status for method, _, status in proxy.log if method == "POST"] == [-1, -1]
    assert tags(registry, "team/silent-job") == []


def test_a_signal_during_a_stalled_upload_stops_the_deploy_at_once(tmp_path, registry, base_image, monkeypatch):
    """The first signal stops the command however busy it is: uploads in other threads are neither waited for
    nor tried again (they were retried for minutes before `vdk` obeyed). The image's temporary files go too."""
    proxy = FaultProxy(registry.port)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process: subprocess.Popen | None = None
    try:
        proxy.faults = [Fault("PUT", r"/blobs/uploads/", "hang", times=1000)]  # every upload stalls
        path = job(tmp_path, "stalled-job", base_image)
        env = {
            **os.environ,
            "VDK_ML_TRAINING_REGISTRY": f"{proxy.host}/team",
            "VDK_ML_TRAINING_REGISTRY_TIMEOUT": "60",
            "TMPDIR": str(scratch),
        }
        command = [
            str(Path(sys.executable).with_name("vdk")),
            "deploy",
            "-p",
            str(path),
            "--build-only",
            "--skip-smoke",
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while not [1 for method, _, status in proxy.log if method == "PUT" and status == -1]:
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        uploads = len([1 for method, _, _ in proxy.log if method == "PUT"])
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if process is not None and process.poll() is None:
            process.kill()  # a failing test leaves no vdk behind
        proxy.stop()
    assert process.returncode == 143, err
    assert "vdk deploy interrupted by SIGTERM." in err and "Traceback" not in err
    assert took < 5, took  # not after the stalled uploads' timeouts and retries
    assert len([1 for method, _, _ in proxy.log if method == "PUT"]) == uploads  # none tried again
    assert list(scratch.iterdir()) == []  # the image's build directory went with it
    assert tags(registry, "team/stalled-job") == []
