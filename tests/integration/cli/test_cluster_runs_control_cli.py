"""With the Control Service CLI installed, `vdk list/show/delete/execute` serve both worlds: ML jobs
(runs in the cluster) go to the plugin, every other name reaches the Control Service's own command
unchanged — and an unconfigured or unreachable cluster never gets in a data job's way.

Runs in the Control Service environment (.venv-cs: `pip install -e '.[dev,control-service]'`)."""

import json
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import HAS_CONTROL_CLI
from tests.support.vdk_cli import vdk
from tests.support.vdk_cli import vdk_process
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.k8s.manifests import render_run

pytestmark = [
    pytest.mark.needs_control_cli,  # `make test` runs them in .venv-cs only
    pytest.mark.skipif(not HAS_CONTROL_CLI, reason="needs vdk-plugin-control-cli (run in .venv-cs)"),
]

NO_CONTROL_SERVICE = "Cannot connect to the Control Service"


def cs_vdk(*args, **kw):
    return vdk(*args, control_cli=True, **kw)


@pytest.fixture
def ml_run(cluster, tmp_path, monkeypatch):
    monkeypatch.delenv("VDK_CONTROL_SERVICE_REST_API_URL", raising=False)
    fake, client = cluster(pytorchjob=True)
    spec = make_spec(tmp_path, name="mnist-ddp", nodes="1", gpus_per_node="1")
    run = client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "job"))[0]
    fake.set_status("jobs", run["metadata"]["name"], {"active": 1})
    pod = fake.add("pods", cs.rank_pod(run, "job", 0, cs.running()))
    fake.set_log(pod["metadata"]["name"], "pytorch", "hello from rank 0\n")
    return fake, client, run


def everything(result) -> str:
    return f"{result.stdout}\n{result.stderr}\n{result.exception!r}"


@pytest.mark.parametrize(
    "args",
    [
        ["show", "-n", "daily-import", "-t", "data-team"],
        ["delete", "-n", "daily-import", "-t", "data-team", "--yes"],
        ["execute", "--logs", "-n", "daily-import", "-t", "data-team"],
    ],
)
def test_a_name_without_ml_runs_reaches_the_control_service_command(ml_run, args):
    result = cs_vdk(*args)
    assert result.exit_code != 0
    assert NO_CONTROL_SERVICE in everything(result)
    assert "hello from rank 0" not in result.stdout


def test_ml_names_go_to_the_plugin_without_team_prompts(ml_run):
    fake, client, run = ml_run
    teams.write_default_team("Vision Research")  # the run's team: deleting it needs no -t
    shown = cs_vdk("show", "-n", "mnist-ddp")  # no -t: the Control Service would prompt "Job Team"
    assert shown.exit_code == 0, everything(shown)
    assert f"Latest run {run['metadata']['name']}: Running" in shown.stdout
    logs = cs_vdk("execute", "--logs", "-n", "mnist-ddp")
    assert logs.exit_code == 0 and logs.stdout == "[rank 0] hello from rank 0\n"
    declined = cs_vdk("delete", "-n", "mnist-ddp", input="n\n")
    assert declined.exit_code == 1 and "Delete this 1 run of mnist-ddp" in declined.stderr
    assert "data job" not in declined.stderr  # the plugin's question, not the Control Service's
    deleted = cs_vdk("delete", "-n", "mnist-ddp", "--yes")
    assert deleted.exit_code == 0 and client.list_runs() == []


def test_the_control_service_cli_s_default_team_selects_ml_runs(ml_run, tmp_path):
    fake, client, run = ml_run
    other = make_spec(tmp_path / "other", name="mnist-ddp", team="beta", nodes="1", gpus_per_node="1")
    theirs = client.apply(render_run(other, IMAGE, make_run(other), "ml", "job"))[0]["metadata"]["name"]
    shown = cs_vdk("show", "-n", "mnist-ddp")  # two teams, no default team: which one is asked, not prompted
    assert shown.exit_code == 1 and "mnist-ddp has runs of 2 teams" in shown.stderr
    # `vdk set-default` is the Control Service CLI's own command (a new process reads its file afresh)
    done = vdk_process("set-default", "-t", "beta")
    assert done.returncode == 0, done.stderr
    assert teams.default_team() == "beta"
    shown = cs_vdk("show", "-n", "mnist-ddp", "-o", "json")
    assert shown.exit_code == 0, everything(shown)
    assert [r["name"] for r in json.loads(shown.stdout)["runs"]] == [theirs]
    deleted = cs_vdk("delete", "-n", "mnist-ddp", "--yes")
    assert deleted.exit_code == 0, everything(deleted)
    assert "Deleting 1 run of mnist-ddp of team beta (--yes)" in deleted.stderr
    assert [r.name for r in client.list_runs()] == [run["metadata"]["name"]]  # the other team's run is kept


def test_ml_only_options_are_refused_for_data_jobs(ml_run):
    result = cs_vdk("execute", "--logs", "--follow", "-n", "daily-import", "-t", "data-team")
    assert result.exit_code == 2 and "--follow applies to ml-training jobs only" in result.stderr


def test_an_unreachable_cluster_does_not_break_data_job_commands(ml_run):
    fake, _, _ = ml_run
    fake.stop()
    result = cs_vdk("show", "-n", "mnist-ddp", "-t", "data-team")
    assert NO_CONTROL_SERVICE in everything(result)
    assert "Kubernetes" not in everything(result)


@pytest.fixture
def no_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("VDK_ML_TRAINING_KUBE_CONTEXT", raising=False)
    monkeypatch.delenv("VDK_CONTROL_SERVICE_REST_API_URL", raising=False)
    return tmp_path / "absent"


def test_no_kubeconfig_and_no_control_service_says_what_each_needs(no_cluster):
    result = cs_vdk("list", "-t", "data-team")
    assert NO_CONTROL_SERVICE in everything(result)
    assert "ml-training" not in result.stdout
    assert (
        f"ml-training jobs are not listed: no Kubernetes cluster is configured for ml-training runs: "
        f"no kubeconfig at {no_cluster} and not running in a pod"
    ) in result.stderr
    assert "Fix: point KUBECONFIG at your cluster's kubeconfig" in result.stderr
    assert "VDK_ML_TRAINING_KUBE_CONTEXT" in result.stderr


def test_no_kubeconfig_with_a_control_service_lists_data_jobs_quietly(no_cluster, control_service):
    result = cs_vdk("list", "-t", "data-team", "-u", control_service.url)
    assert result.exit_code == 0, everything(result)
    assert "daily-import" in result.stdout and "ml-training" not in result.stdout
    assert "Kubernetes" not in result.stderr


# --- vdk list: ML jobs and data jobs together ------------------------------------------------------------


class ControlService:
    """The one Control Service request `vdk list` makes: the GraphQL-like jobs query of a team."""

    def __init__(self, jobs: list[dict]):
        jobs_json = json.dumps({"data": {"content": jobs, "totalItems": len(jobs), "totalPages": 1}}).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                ok = self.path.startswith("/data-jobs/for-team/")
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(jobs_json) if ok else 0))
                self.end_headers()
                if ok:
                    self.wfile.write(jobs_json)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def control_service():
    service = ControlService([{"jobName": "daily-import", "config": {"team": "data-team"}, "deployments": []}])
    yield service
    service.stop()


def test_list_shows_ml_jobs_then_data_jobs(ml_run, control_service):
    _, _, run = ml_run
    result = cs_vdk("list", "-t", "Vision Research", "-u", control_service.url)
    assert result.exit_code == 0, everything(result)
    ml_part, data_part = result.stdout.split("Data jobs (Control Service):")
    assert run["metadata"]["name"] in ml_part and "daily-import" not in ml_part
    assert "daily-import" in data_part and "data-team" in data_part


def test_list_json_is_one_array_with_a_kind(ml_run, control_service):
    _, _, run = ml_run
    result = cs_vdk("list", "-a", "-u", control_service.url, "-o", "json")
    assert result.exit_code == 0, everything(result)
    entries = json.loads(result.stdout)
    assert [(e["kind"], e["job_name"]) for e in entries] == [("ml-training", "mnist-ddp"), ("data-job", "daily-import")]
    assert entries[0]["latest_run"] == run["metadata"]["name"]
    assert entries[1] == {
        "kind": "data-job",
        "job_name": "daily-import",
        "job_team": "data-team",
        "status": "NOT_DEPLOYED",
    }


def test_list_of_an_unreachable_cluster_still_lists_data_jobs(ml_run, control_service):
    fake, _, _ = ml_run
    fake.stop()
    result = cs_vdk("list", "-a", "-u", control_service.url, "-o", "json")
    assert result.exit_code == 0, everything(result)
    assert [e["kind"] for e in json.loads(result.stdout)] == ["data-job"]
    assert "ml-training jobs are not listed: cannot reach the Kubernetes API server" in result.stderr


def test_list_without_a_control_service_url_is_ml_only(ml_run):
    result = cs_vdk("list", "-o", "json")
    assert result.exit_code == 0, everything(result)
    assert [e["kind"] for e in json.loads(result.stdout)] == ["ml-training"]
