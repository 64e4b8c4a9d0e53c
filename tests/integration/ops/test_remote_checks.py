"""`vdk deploy` finds remote problems while its smoke run runs, not after it: the real vdk CLI, a real
registry process, the fake API server, a real smoke run that sleeps for ten minutes. Each problem (a
forbidden create or read, a missing namespace, a registry that is down, rejected credentials, a base
tag that does not exist, a requirement that cannot be resolved) stops the smoke run and is reported with
its fix long before the run could end; nothing is pushed, nothing is created, no rank is left."""

from __future__ import annotations

import base64
import json
import shutil
import time
from pathlib import Path

import pytest
import requests
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark
from tests.support.registry import free_port
from vdk.plugin.ml_training import plugin

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("isolated_environment")]

# Trains nothing: its one rank sleeps past any test's patience; only a remote check can end the smoke run.
SLEEPS = """\
import time

if __name__ == "__main__":
    time.sleep(600)
"""
# Far below the smoke run's ten minutes of sleep (and its 10-minute timeout).
REPORTED_WITHIN = 60


def sleeping_job(root: Path, name: str, base_image: str, mark: str, ml: str = "", files: dict | None = None) -> Path:
    return write_job(
        root,
        name,
        team="ml-platform",
        # the test base stands in for a PyTorch base: it says it has torch
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 1\n{ml}",
        env={MARK: mark},
        files={"train.py": SLEEPS, **(files or {})},
    )


def created_nothing(fake) -> bool:
    return (
        all(
            method == "GET" or query.get("dryRun") == "All" or path.endswith("/selfsubjectaccessreviews")
            for method, path, query in fake.requests
        )
        and fake.run_objects() == []
    )


def pushed_nothing(registry, repository: str) -> bool:
    answer = requests.get(f"{registry.url}/v2/{repository}/tags/list", timeout=5, verify=False)
    return answer.status_code in (401, 404) or not answer.json().get("tags")


def deploy_stopped_by(check: str, job: Path, mark: str) -> str:
    """Deploy `job`; the smoke run must be stopped by the `check` check, in time. Returns stderr."""
    started = time.monotonic()
    result = CliEntryBasedTestRunner(plugin).invoke(["deploy", "-p", str(job)])
    took = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert took < REPORTED_WITHIN, result.stderr
    assert "Pre-flight: smoke check" in result.stderr  # the smoke run was started ...
    assert f"smoke run stopped: the {check} check failed" in result.stderr  # ... and stopped by the check
    assert "smoke run PASSED" not in result.stderr and "Nothing was built or deployed." in result.stderr
    assert "Fix:" in result.stderr
    assert left_after(mark, 10) == []  # the sleeping rank is gone
    return result.stderr


@pytest.mark.parametrize(
    "forbidden, message",
    [
        (("create", "pytorchjobs"), "you are not allowed to create pytorchjobs.kubeflow.org in namespace ml"),
        (("create", "configmaps"), "you are not allowed to create configmaps in namespace ml"),
        (("list", "pytorchjobs"), "you are not allowed to list pytorchjobs.kubeflow.org in namespace ml"),
        (("update", "configmaps"), "you are not allowed to update configmaps in namespace ml"),  # its run owns it
    ],
)
def test_a_forbidden_create_or_read_stops_the_smoke_run(
    forbidden, message, tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True, forbidden={forbidden})[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    mark = new_mark()
    verb, plural = forbidden
    name = f"check-{verb}-{plural}"  # the session's registry is shared: a name no other test pushes
    stderr = deploy_stopped_by("cluster", sleeping_job(tmp_path, name, base_image, mark), mark)
    assert message in stderr
    assert f"auth can-i {verb} {plural}" in stderr  # how to check it
    assert created_nothing(fake) and pushed_nothing(registry, f"team/{name}")


def test_a_missing_namespace_stops_the_smoke_run(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", "nope")
    mark = new_mark()
    stderr = deploy_stopped_by("cluster", sleeping_job(tmp_path, "check-no-ns-job", base_image, mark), mark)
    assert "the namespace nope does not exist" in stderr and "create namespace nope" in stderr
    assert created_nothing(fake) and pushed_nothing(registry, "team/check-no-ns-job")


def test_a_registry_that_is_down_stops_the_smoke_run(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{down}/team")
    mark = new_mark()
    stderr = deploy_stopped_by("registry", sleeping_job(tmp_path, "check-down-job", base_image, mark), mark)
    assert f"cannot reach {down} to start an upload to team/check-down-job" in stderr
    assert "that the registry is up" in stderr
    assert created_nothing(fake)


def test_rejected_registry_credentials_stop_the_smoke_run(tmp_path, auth_registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    certs = tmp_path / "xdg-config" / "containers" / "certs.d" / auth_registry.host  # trust its CA
    certs.mkdir(parents=True)
    shutil.copy(auth_registry.tls[0], certs / "ca.crt")
    config = tmp_path / "docker-config" / "config.json"  # `docker login` with a wrong password
    config.parent.mkdir(parents=True, exist_ok=True)
    wrong = base64.b64encode(b"ada:Tr0ub4dor-guess").decode()
    config.write_text(json.dumps({"auths": {auth_registry.host: {"auth": wrong}}}))
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{auth_registry.host}/team")
    mark = new_mark()
    stderr = deploy_stopped_by("registry", sleeping_job(tmp_path, "check-creds-job", base_image, mark), mark)
    assert (
        f"the credentials for {auth_registry.host} from {config} (auths: {auth_registry.host}) were rejected" in stderr
    )
    assert f"podman login {auth_registry.host}" in stderr and "Tr0ub4dor" not in stderr
    assert created_nothing(fake)
    catalog = auth_registry.root / "data" / "docker" / "registry" / "v2" / "repositories"
    assert not catalog.exists() or not any(catalog.iterdir())  # not even an empty repository


def test_a_base_tag_that_does_not_exist_stops_the_smoke_run(tmp_path, registry, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    mark = new_mark()
    job = sleeping_job(tmp_path, "check-no-base-job", f"{registry.host}/base/busybox:no-such-tag", mark)
    stderr = deploy_stopped_by("base image", job, mark)
    assert f"{registry.host}/base/busybox:no-such-tag does not exist" in stderr
    assert "check the base image name and tag" in stderr
    assert created_nothing(fake) and pushed_nothing(registry, "team/check-no-base-job")


def test_a_requirement_that_cannot_be_resolved_stops_the_smoke_run(
    tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    wheels = tmp_path / "no-wheels"
    wheels.mkdir()
    requirements = f"--no-index\n--find-links {wheels}\nno-such-package-anywhere==1.0\n"
    mark = new_mark()
    files = {"requirements.txt": requirements}
    # the smoke run's own overlay (requirements.txt installed for it, as in the image) cannot be made either:
    # the deploy ends there, before the smoke run starts, with the same resolution error
    job = sleeping_job(tmp_path, "check-unresolvable-job", base_image, mark, files=files)
    result = CliEntryBasedTestRunner(plugin).invoke(["deploy", "-p", str(job)])
    assert result.exit_code == 1, result.output
    assert "cannot be installed" in result.stderr and "no-such-package-anywhere" in result.stderr, result.stderr
    assert "smoke run PASSED" not in result.stderr and "Fix:" in result.stderr
    assert created_nothing(fake) and pushed_nothing(registry, "team/check-unresolvable-job")
    # without the overlay the smoke run starts, and the dependencies check stops it
    ml = "requirements_overlay = false\n"
    job = sleeping_job(tmp_path, "check-unresolvable-job-2", base_image, mark, ml=ml, files=files)
    stderr = deploy_stopped_by("dependencies", job, mark)
    assert "requirements.txt cannot be installed for Python 3.11" in stderr and "no-such-package-anywhere" in stderr
    assert created_nothing(fake) and pushed_nothing(registry, "team/check-unresolvable-job-2")
