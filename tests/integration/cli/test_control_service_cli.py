"""The Control Service CLI's own verbs (vdk-control-cli, installed: .venv-cs) for an ml-training job deployed through
the test Control Service, by a user with VDK credentials only (no kubeconfig): `vdk deploy` goes through the service,
and `vdk list`, `vdk show`, `vdk execute --logs/--show/--start/--cancel` show and drive its executions as they do a
data job's, the server's refusals shown as the CLI shows them."""

from __future__ import annotations

import re

import pytest

from tests.support.job_controller import LocalJobController
from tests.support.jobs import cs_job
from tests.support.vdk_cli import HAS_CONTROL_CLI
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient

pytestmark = [
    pytest.mark.needs_control_cli,  # `make test` runs them in .venv-cs only
    pytest.mark.skipif(not HAS_CONTROL_CLI, reason="needs vdk-plugin-control-cli (run in .venv-cs)"),
    pytest.mark.usefixtures("isolated_environment"),
]


def test_the_control_service_clis_verbs_show_and_drive_the_executions_of_an_ml_job(
    control_service, tmp_path, monkeypatch
):
    service, fake = control_service()
    job = cs_job(tmp_path / "repo", args="--steps 3")
    ml_cluster = str(tmp_path / "kubeconfig-ml")  # what the test reads the runs with; the user has none
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    # the URL as an option: the Control Service CLI reads its variable into its options' defaults when its modules
    # are first imported, which would leave this test's URL to the tests that come after it

    def cli(*args):
        result = vdk(*args, "-u", service.url, control_cli=True)
        return result, f"{result.stdout}\n{result.stderr}\n{result.exception!r}"

    controller = LocalJobController(fake, job, {}).start()
    try:
        deployed, said = cli("deploy", "-p", str(job), "--skip-smoke")
        assert deployed.exit_code == 0, said
        execution = re.search(r"Started execution (\S+):", deployed.stdout)[1]
        assert service.wait_finished(execution).status == "succeeded", service.log(execution)

        logs, said = cli("execute", "--logs", "-n", "cs-train", "-t", "ml-team")
        assert logs.exit_code == 0 and "[rank 0] step 2: loss=0.333" in logs.stdout, said
        shown, said = cli("execute", "--show", "-n", "cs-train", "-t", "ml-team", "-i", execution, "-o", "json")
        assert shown.exit_code == 0 and '"status": "succeeded"' in shown.stdout, said
        listed, said = cli("list", "-t", "ml-team", "-o", "json")
        assert listed.exit_code == 0 and '"job_name": "cs-train"' in listed.stdout, said
        show, said = cli("show", "-n", "cs-train", "-t", "ml-team")
        assert show.exit_code == 0 and execution in show.stdout, said

        started, said = cli("execute", "--start", "-n", "cs-train", "-t", "ml-team", "--arguments",
                            '{"args": "--steps 300 --sleep 0.2"}')  # fmt: skip
        assert started.exit_code == 0, said
        (second,) = [e for e in service.executions if e != execution]
        service.wait(lambda: "[rank 0] step 1" in service.log(second), 60, "the second run did not start")
        refused, said = cli("execute", "--start", "-n", "cs-train", "-t", "ml-team")
        assert refused.exit_code == 2 and "The Data Job 'cs-train' is currently being executed." in said
        cancelled, said = cli("execute", "--cancel", "-n", "cs-train", "-t", "ml-team", "-i", second)
        assert cancelled.exit_code == 0, said
        service.executions[second].pod.join(60)
    finally:
        controller.stop()
    assert service.executions[second].status == "cancelled"
    assert "was cancelled: run" in service.log(second)
    monkeypatch.setenv("KUBECONFIG", ml_cluster)
    assert len(KubeClient().list_runs(job_name="cs-train")) == 1  # the cancelled execution's run is deleted
