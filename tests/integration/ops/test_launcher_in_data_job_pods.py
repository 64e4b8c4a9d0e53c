"""The launcher (ops/cs_launch.py) in the test Control Service's data-job pods (tests/support/control_service.py):
`vdk run ./<job>` with the pod's variables, against the fake API server, the run's pods run as local processes.
What the Control Service's own views then show: the execution's status (from the termination message) and its log.
A restarted launcher re-attaches to its run; a launcher past its deadline reports and leaves the run going, and the
next execution starts no second one; a cancelled execution deletes its run; a scheduled execution of an unchanged
job with `if_changed` starts nothing; a launcher the cluster refuses is the platform's error."""

from __future__ import annotations

import pytest
import requests

from tests.support.job_controller import LocalJobController
from tests.support.jobs import cs_job
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient

pytestmark = pytest.mark.usefixtures("isolated_environment")


def no_build(image, args, env):
    """A builder that pushes nothing (the launcher then runs the image by its tag)."""
    return 0, ""


def deployed(control_service, tmp_path, args: str, extra: str = "", **options):
    service, fake = control_service(builder=no_build, **options)
    job = cs_job(tmp_path / "repo", args=args, extra=extra)
    result = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "--build-only")
    assert result.exit_code == 0, result.output
    return service, fake, job, service.jobs["cs-train"]


def runs() -> list:
    return KubeClient().list_runs(job_name="cs-train")


def test_a_restarted_launcher_follows_the_run_it_started_and_reports_its_failure(control_service, tmp_path):
    service, fake, job, data_job = deployed(control_service, tmp_path, "--steps 12 --sleep 0.4 --fail")
    controller = LocalJobController(fake, job, {}).start()
    try:
        execution = service.start_execution(data_job, "manual/test", {})
        service.wait(lambda: "[rank 0] step 2" in service.log(execution.id), 60, "rank 0 did not print")
        execution.pod.crash()  # the kubelet starts the container again: the same pod, the same attempt
        execution = service.wait_finished(execution.id)
    finally:
        controller.stop()
    log = service.log(execution.id)
    assert execution.pod.restarts == 1
    assert "re-attached to run cs-train-" in log, log
    assert len(runs()) == 1  # the second attempt started none
    assert execution.status == "user_error", log
    assert "RuntimeError: the loss diverged" in log  # the failing rank's last lines
    assert "execution ends: User error" in log


def test_past_its_deadline_the_launcher_leaves_the_run_going_and_the_next_execution_starts_none(
    control_service, tmp_path
):
    service, fake, job, data_job = deployed(control_service, tmp_path, "--steps 60 --sleep 0.5", deadline_seconds=20)
    controller = LocalJobController(fake, job, {}).start()
    try:
        first = service.start_execution(data_job, "manual/test", {})
        first = service.wait_finished(first.id, timeout=60)
        log = service.log(first.id)
        assert first.status == "user_error" and not first.pod.deadline_exceeded, log  # it left before the kill
        assert "the launcher's time is up" in log and "goes on, neither stopped nor started again" in log
        print(log)
        (run,) = runs()
        assert not run.finished
        tick = service.tick("cs-train")
        tick = service.wait_finished(tick.id, timeout=60)
        assert tick.status == "skipped", service.log(tick.id)
        assert f"run {run.name} of cs-train is still running" in service.log(tick.id)
        print(service.log(tick.id))
        assert [r.name for r in runs()] == [run.name]  # not doubled
    finally:
        controller.stop()


def test_if_changed_skips_a_scheduled_execution_and_a_cancel_deletes_the_run(control_service, tmp_path):
    service, fake, job, data_job = deployed(control_service, tmp_path, "--steps 2", extra="if_changed = true\n")
    controller = LocalJobController(fake, job, {}).start()
    try:
        first = service.wait_finished(service.start_execution(data_job, "manual/test", {}).id)
        assert first.status == "succeeded", service.log(first.id)
        (succeeded,) = runs()
        tick = service.wait_finished(service.tick("cs-train").id)
        assert tick.status == "skipped", service.log(tick.id)
        assert f"changed since the last successful run {succeeded.name}" in service.log(tick.id)
        long = service.start_execution(data_job, "manual/test", {"args": "--steps 200 --sleep 0.2"})
        service.wait(lambda: "[rank 0] step 1" in service.log(long.id), 60, "rank 0 did not print")
        path = f"/data-jobs/for-team/ml-team/jobs/cs-train/executions/{long.id}"
        assert requests.delete(service.url + path, timeout=30).status_code == 200
        long.pod.join(60)
    finally:
        controller.stop()
    log = service.log(long.id)
    assert long.status == "cancelled"
    assert f"execution {long.id} was cancelled: run" in log, log
    assert [r.name for r in runs()] == [succeeded.name]


def test_a_launcher_the_cluster_refuses_or_without_credentials_is_the_platforms_error_bad_arguments_the_users(
    control_service, tmp_path
):
    service, fake, job, data_job = deployed(control_service, tmp_path, "--steps 1")
    fake.forbidden.add(("create", "jobs"))
    refused = service.wait_finished(service.start_execution(data_job, "manual/test", {}).id)
    assert refused.status == "platform_error", service.log(refused.id)
    assert "Fix:" in service.log(refused.id)
    fake.forbidden.clear()
    bad = service.wait_finished(service.start_execution(data_job, "manual/test", {"nodes": "zero"}).id)
    assert bad.status == "user_error"
    assert "nodes" in service.log(bad.id) and runs() == []
    service.kubeconfig = tmp_path / "no-token"  # a pod without its account's token
    tokenless = service.wait_finished(service.start_execution(data_job, "manual/test", {}).id)
    assert tokenless.status == "platform_error", service.log(tokenless.id)
    assert "automountServiceAccountToken: true in the data-job template" in service.log(tokenless.id)
