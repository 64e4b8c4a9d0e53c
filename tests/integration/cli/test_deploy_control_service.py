"""`vdk deploy` of an ml-training job through the VDK Control Service, end to end against the test Control Service
(tests/support/control_service.py: the real server's API, codes and error bodies): the job's files uploaded with its
own commit, the deployment built by this plugin's builder as the service starts builders (pushed to the tests'
registry, tagged with the service's version), an execution whose data-job pod runs the launcher (`vdk run ./<job>`
with the pod's variables) against the fake API server, the run's pods run as local processes, the run's result as
the execution's status and rank 0's output as its log."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests

from tests.support.job_controller import LocalJobController
from tests.support.jobs import cs_job
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.run_identity import ANNOTATION_EXECUTION
from vdk.plugin.ml_training.k8s.run_identity import ANNOTATION_GIT_COMMIT
from vdk.plugin.ml_training.source.audit import UPLOADED_PROVENANCE

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_a_deploy_goes_through_the_control_service_and_its_execution_reports_the_run(
    control_service, tmp_path, registry
):
    service, fake = control_service()
    job = cs_job(tmp_path / "repo", args="--steps 3")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=job, capture_output=True, text=True).stdout.strip()
    controller = LocalJobController(fake, job, {}).start()
    try:
        result = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "-o", "json")
        assert result.exit_code == 0, result.output
        deployed = json.loads(result.stdout)
        execution = service.wait_finished(deployed["execution_id"])
    finally:
        controller.stop()
    log = service.log(execution.id)
    assert execution.status == "succeeded", log
    # the job's own commit travelled with the files, into the service's repository and the run's audit trail
    assert deployed["git_commit"] == commit
    uploaded = json.loads((service.repo / "cs-train" / UPLOADED_PROVENANCE).read_text())
    assert uploaded["git_commit"] == commit and uploaded["git_dirty"] is False
    # the builder pushed the tag the service's CronJob runs
    build = service.builds[-1]
    assert build.result == "success", build.log
    tags = requests.get(f"{registry.url}/v2/data-jobs/cs-train/tags/list", timeout=5).json()["tags"]
    assert deployed["job_version"] in tags
    # the run is named after the execution, and runs the pushed image by digest
    run = KubeClient().get_run(deployed["run"])
    annotations = run["metadata"]["annotations"]
    assert annotations[ANNOTATION_EXECUTION] == execution.id and annotations[ANNOTATION_GIT_COMMIT] == commit
    image = run["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(f"{registry.host}/data-jobs/cs-train@sha256:")
    # rank 0's output is the execution's log, each line with the service's timestamp
    lines = [line.split(" ", 1)[1] for line in log.splitlines()]
    assert "[rank 0] step 2: loss=0.333" in lines and "[rank 0] training done" in lines
    assert f"{deployed['run']} Succeeded" in lines
