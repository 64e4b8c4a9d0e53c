"""`vdk deploy` of an ml-training job through the VDK Control Service, end to end against the test Control Service
(tests/support/control_service.py: the real server's API, codes and error bodies): the job's files uploaded with its
own commit, the deployment built by this plugin's builder as the service starts builders (pushed to the tests'
registry, tagged with the service's version), an execution whose data-job pod runs the launcher (`vdk run ./<job>`
with the pod's variables) against the fake API server, the run's pods run as local processes, the run's result as
the execution's status and rank 0's output as its log."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
import requests

from tests.support.job_controller import LocalJobController
from tests.support.jobs import cs_job
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.runs.identity import ANNOTATION_EXECUTION
from vdk.plugin.ml_training.k8s.runs.identity import ANNOTATION_GIT_COMMIT
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


def test_without_the_operators_set_up_a_deploy_goes_to_kubernetes_and_a_dry_run_says_what_is_missing(
    control_service, tmp_path, base_image
):
    service, _ = control_service(supported={"3.11": {"baseImage": base_image}})
    job = cs_job(tmp_path / "repo", extra=f"base_image = {base_image}\n")
    dry = vdk("deploy", "-p", str(job), "-u", service.url, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "kind: Job" in dry.stdout  # the plan as before
    assert "VDK Control Service set-up for ml-training (not used:" in dry.stderr
    assert "  ok      the Control Service's URL: " + service.url in dry.stderr
    assert (
        "  MISSING the ml-training entry `ml-training` among its supported Python versions: it has 3.11" in dry.stderr
    )
    assert "Fix: add `ml-training` to the Helm value deploymentSupportedPythonVersions" in dry.stderr
    direct = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke")
    assert "note: deploying to Kubernetes directly, not through the VDK Control Service: the Control Service at " in (
        direct.stderr
    )
    assert "lack the entry ml-training" in direct.stderr
    assert "no registry to push the image of cs-train to" in direct.output  # as before: it needs one
    assert [path for method, path, _ in service.requests if method != "GET"] == []  # nothing was sent


@pytest.fixture
def token_server():
    """An OAuth2 token endpoint: the refresh-token grant of an API token, as the Control Service CLI makes it."""
    grants = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            grants.append(form)
            ok = form.get("grant_type") == ["refresh_token"] and form.get("refresh_token") == ["api-token"]
            body = json.dumps({"access_token": "secret-token", "expires_in": 1800} if ok else {}).encode()
            self.send_response(200 if ok else 400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/token", grants
    server.shutdown()
    server.server_close()


def test_the_services_refusals_and_what_it_cannot_take_are_said_with_their_fix(
    control_service, tmp_path, monkeypatch, token_server
):
    service, _ = control_service(token="secret-token", builder=lambda image, args, env: (0, ""))
    job = cs_job(tmp_path / "repo")
    refused = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke")
    assert refused.exit_code == 1
    assert f"the VDK Control Service at {service.url} did not accept your credentials" in refused.output
    assert "log in with `vdk login`" in refused.output
    # an API token, exchanged at its authorization URL: the user's VDK credentials
    url, grants = token_server
    refused_requests = len(service.requests)
    monkeypatch.setenv("VDK_API_TOKEN", "api-token")
    monkeypatch.setenv("VDK_API_TOKEN_AUTHORIZATION_URL", url)
    accepted = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "--build-only")
    assert accepted.exit_code == 0, accepted.output
    sent = service.requests[refused_requests:]
    assert grants and sent and all(h.get("Authorization") == "Bearer secret-token" for _, _, h in sent)
    monkeypatch.delenv("VDK_API_TOKEN")
    requests_before = len([m for m, _, _ in service.requests if m == "POST"])
    service.token = None
    short = vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "-n", "short")
    assert short.exit_code == 1 and "takes job names of 6 to 50 characters" in short.output
    assert "Fix: deploy it under another name with -n NAME" in short.output
    teamless = cs_job(tmp_path / "other", team="")
    assert "has no team" in vdk("deploy", "-p", str(teamless), "-u", service.url, "--skip-smoke").output
    assert len([m for m, _, _ in service.requests if m == "POST"]) == requests_before  # nothing more was uploaded


def test_an_operators_dry_run_reads_the_data_job_template_and_the_launchers_permissions(
    control_service, tmp_path, monkeypatch, base_image
):
    service, fake = control_service(builder=lambda image, args, env: (0, ""))
    job = cs_job(tmp_path / "repo", extra=f"base_image = {base_image}\n")
    assert vdk("deploy", "-p", str(job), "-u", service.url, "--skip-smoke", "--build-only").exit_code == 0
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig-pod"))  # the operator's: the data-jobs namespace
    ready = vdk("deploy", "-p", str(job), "-u", service.url, "--dry-run").stderr
    assert "(used: the Control Service at" in ready
    assert "  ok      the launcher's switch in the data-job pods: VDK_ML_TRAINING_LAUNCHER=true" in ready
    assert "  ok      the launcher's service account and its token: ml-launcher, token mounted" in ready
    assert "  ok      the template's deadline: activeDeadlineSeconds 43200: the launcher leaves after" in ready
    launcher = "system:serviceaccount:data-jobs:ml-launcher"
    assert f"  ok      what the launcher ({launcher}) may do: everything, in namespace ml and data-jobs" in ready
    service.vdk_options.pop("VDK_ML_TRAINING_LAUNCHER")
    service.service_account = None
    from tests.support.control_service_pods import write_cronjob

    write_cronjob(service, service.jobs["cs-train"], "abc")
    lacking = vdk("deploy", "-p", str(job), "-u", service.url, "--dry-run").stderr
    assert "  MISSING the launcher's switch in the data-job pods: VDK_ML_TRAINING_LAUNCHER=(not set)" in lacking
    assert "Fix: add `VDK_ML_TRAINING_LAUNCHER=true` under [default] of the Helm value vdkOptions" in lacking
    assert "  MISSING the launcher's service account and its token: default, token not mounted" in lacking
    default = "system:serviceaccount:data-jobs:default"
    fake.denied.update({(default, "create", "jobs", "ml"), (default, "get", "pods/log", "ml")})
    lacking = vdk("deploy", "-p", str(job), "-u", service.url, "--dry-run").stderr
    assert (
        f"  MISSING what the launcher ({default}) may do: it may not create jobs in ml, get pods/log in ml" in lacking
    )
