"""A test VDK Control Service: a loopback HTTP server that speaks the Control Service's REST API as the installed
vdk-control-cli uses it, with the real server's codes and error bodies (`{what, why, consequences, countermeasures}`,
the texts of its exceptions; an empty body for many "not found"s), and does what the server does behind it
(/work/notes/research-37.md, sections 2, 3 and 5):

- sources: the zip's first folder committed to a git repository (the same tree: the same commit), which it serves
  over git's dumb HTTP protocol with basic authentication, as a builder clones it;
- a deployment: 202, then, in a thread, the builder of the `python_version` entry started as the service starts
  it (its eleven positional arguments and variables; `builder(...)` of tests/support/control_service_pods.py runs
  it as a local process or a podman container), judged by its log's markers, and on success the deployment (a
  CronJob in the fake API server, rendered from a data-job template);
- an execution: 202 with its `Location`, then its Kubernetes Job in the fake API server (deadline, annotations) and
  its pod, whose container runs `vdk run ./<job>` in the image's working directory with the data-job pod's
  variables (VDK_ATTEMPT_ID, LOG_CONFIG=CLOUD, vdkOptions, VDK_JOB_TEAM...); restarted when it fails (the Job's
  backoffLimit), stopped at its deadline, its status read from its termination message; its log each line with a
  RFC3339Nano timestamp; cancelled by deleting its Job (SIGTERM while the Job has a deletion time);
- a tick of the schedule (`tick(job)`): an execution of type scheduled, none while one is active (Forbid).
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import zipfile
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlparse

from tests.support import control_service_pods as pods
from tests.support.loopback_http import serve

NAME_RULE = r"^[a-z][a-z0-9-]{5,49}$"
GIT_USER, GIT_PASSWORD = "git-bot", "git-secret"
REGISTRY_USER, REGISTRY_PASSWORD = "", ""  # the tests' registry takes anyone
ACTIVE = ("submitted", "running")


def error(what: str, why: str, consequences: str, countermeasures: str) -> dict:
    return {"what": what, "why": why, "consequences": consequences, "countermeasures": countermeasures}


def job_not_found(job: str) -> dict:
    return error(
        f"The Data Job '{job}' does not exist.",
        "The Data Job must be existing.",
        "The Data Job will not be started.",
        "Provide a Data Job that already exists or create a new one and try again.",
    )


def unsupported_python(version: str, supported: list[str]) -> dict:
    return error(
        f"Not supported python version: '{version}'",
        "The selected python version is not supported by the platform.",
        "The deployment of the data job will not proceed. ",
        "To deploy the data job, please set the python_version property to one of the supported versions: "
        f"'[{', '.join(supported)}]'.",
    )


@dataclass
class Job:
    name: str
    team: str
    description: str = ""
    config: dict = field(default_factory=lambda: {"schedule": {}})
    deployment: dict | None = None  # what GET /deployments shows, once built


@dataclass
class Execution:
    id: str
    job: str
    type: str  # manual / scheduled
    started_by: str
    args: dict
    deployment: dict
    status: str = "submitted"
    message: str | None = None
    start_time: str = ""
    end_time: str | None = None
    pod: pods.LauncherPod | None = None


@dataclass
class Build:
    job: str
    version: str
    log: str
    exit_code: int
    result: str  # success, user_error, platform_error (how the service judged it)
    message: str = ""


class TestControlService:
    """Configure, `start()`, and point vdk at `url`. `supported`: the entries of deploymentSupportedPythonVersions
    ({key: {"baseImage", "vdkImage", "builderImage"}}); `vdk_options`: the data-job pods' variables."""

    __test__ = False  # not a test class

    def __init__(
        self,
        workdir: Path,
        fake: Any,
        registry: str,
        *,
        supported: dict[str, dict] | None = None,
        builder: pods.Builder | None = None,
        vdk_options: dict[str, str] | None = None,
        kubeconfig: Path | None = None,
        namespace: str = "data-jobs",
        deadline_seconds: int = 43200,
        backoff_limit: int = 3,
        service_account: str | None = "ml-launcher",
        token: str | None = None,
    ):
        self.workdir = workdir
        self.fake = fake
        self.registry = registry  # IMAGE_REGISTRY_PATH, e.g. 127.0.0.1:5000/data-jobs
        self.supported = supported if supported is not None else {}
        self.builder = builder
        self.vdk_options = dict(vdk_options or {})
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.deadline_seconds = deadline_seconds
        self.backoff_limit = backoff_limit
        self.service_account = service_account
        self.token = token  # when set, the API answers 401 to a request without `Authorization: Bearer <token>`
        self.jobs: dict[str, Job] = {}
        self.executions: dict[str, Execution] = {}
        self.builds: list[Build] = []
        self.requests: list[tuple[str, str, dict]] = []  # (method, path, headers)
        self.lock = threading.RLock()
        self.repo = workdir / "data-jobs"
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self._git("init", "--quiet", "--initial-branch", "master", str(self.repo), cwd=workdir)
        self._git("commit", "--quiet", "--allow-empty", "-m", "the data jobs")

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> TestControlService:
        service = self

        class Handler(_Handler):
            state = service

        self._server = serve(Handler, poll_interval=0.05)
        return self

    def stop(self) -> None:
        for execution in list(self.executions.values()):
            if execution.pod is not None:
                execution.pod.kill()
        for thread in self._threads:
            thread.join(30)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def git_repository(self) -> str:
        """The builder's 7th argument: the repository without its scheme."""
        return f"{urlparse(self.url).netloc}/data-jobs.git"

    def wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition():
                    return
            time.sleep(0.1)
        raise AssertionError(f"{what} within {timeout} s; executions: {self.summary()}")

    def summary(self) -> str:
        return (
            "; ".join(
                f"{e.id} {e.status} {e.message or ''}, its log ends:\n{self.log(e.id)[-3000:]}"
                for e in self.executions.values()
            )
            or "none"
        )

    def wait_finished(self, execution: str, timeout: float = 120) -> Execution:
        self.wait(lambda: self.executions[execution].status not in ACTIVE, timeout, f"{execution} did not end")
        return self.executions[execution]

    def log(self, execution: str) -> str:
        pod = self.executions[execution].pod
        return pod.log_text() if pod is not None else ""

    # --- sources -----------------------------------------------------------------------------------

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", "-c", "user.email=cs@example.com", "-c", "user.name=cs", *args],
            cwd=cwd or self.repo,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def upload(self, job: str, archive: bytes, reason: str) -> str:
        import io
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            with zipfile.ZipFile(io.BytesIO(archive)) as z:
                z.extractall(tmp)
                top = z.namelist()[0].split("/", 1)[0]  # the first entry's folder is the job, whatever its name
            target = self.repo / job
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(Path(tmp) / top, target)
        self._git("add", "-A", job)
        if self._git("status", "--porcelain", "--", job):
            self._git("commit", "--quiet", "-m", reason or f"Updating data job: {job}")
        self._git("update-server-info")
        return self._git("log", "-1", "--format=%H", "--", job)

    def checkout(self, version: str, target: Path) -> Path:
        """The repository's files at `version` (what an image built from it holds)."""
        if not target.exists():
            target.mkdir(parents=True)
            archive = subprocess.run(["git", "archive", version], cwd=self.repo, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        return target

    # --- deployments -------------------------------------------------------------------------------

    def deploy(self, job: Job, version: str, python_version: str) -> None:
        thread = threading.Thread(target=self._build_and_schedule, args=(job, version, python_version), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _build_and_schedule(self, job: Job, version: str, python_version: str) -> None:
        entry = self.supported[python_version]
        assert self.builder is not None, "this test Control Service has no builder"
        args = [
            "generic", "generic", "generic", self.registry, GIT_USER, GIT_PASSWORD, self.git_repository, "generic",
            REGISTRY_USER, REGISTRY_PASSWORD, "generic",
        ]  # fmt: skip
        env = {
            "JOB_NAME": job.name,
            "DATA_JOB_NAME": job.name,
            "GIT_COMMIT": version,
            "JOB_GITHASH": version,
            "GIT_BRANCH": "master",
            "IMAGE_REGISTRY_PATH": self.registry,
            "BASE_IMAGE": entry.get("baseImage", ""),
            "EXTRA_ARGUMENTS": "",
            "GIT_SSL_ENABLED": "false",
        }
        exit_code, log = self.builder(entry.get("builderImage", ""), args, env)
        result, message = judge_builder(exit_code, log)
        with self.lock:
            self.builds.append(Build(job.name, version, log, exit_code, result, message))
            if result != "success":
                return
            now = _now()
            job.deployment = {
                "vdk_version": entry.get("vdkImage", "").rsplit(":", 1)[-1],
                "job_version": version,
                "python_version": python_version,
                "mode": "release",
                "id": "production",
                "enabled": True,
                "contacts": job.config.get("contacts") or {},
                "schedule": {"schedule_cron": (job.config.get("schedule") or {}).get("schedule_cron") or ""},
                "resources": {},
                "last_deployed_date": now,
                "last_deployed_by": "user",
            }
        pods.write_cronjob(self, job, version)

    # --- executions --------------------------------------------------------------------------------

    def start_execution(self, job: Job, started_by: str, args: dict, scheduled: bool = False) -> Execution:
        with self.lock:
            number = int(time.time()) // (60 if scheduled else 1)
            while f"{job.name}-{number}" in self.executions:
                number += 1
            execution = Execution(
                id=f"{job.name}-{number}",
                job=job.name,
                type="scheduled" if scheduled else "manual",
                started_by=started_by,
                args=args,
                deployment=dict(job.deployment or {}),
                start_time=_now(),
            )
            self.executions[execution.id] = execution
        execution.pod = pods.LauncherPod(self, job, execution)
        execution.pod.start()
        return execution

    def tick(self, job: str) -> Execution | None:
        """A tick of the job's schedule: a scheduled execution, none while one is active (concurrencyPolicy: Forbid
        skips it without a record)."""
        with self.lock:
            if any(e.job == job and e.status in ACTIVE for e in self.executions.values()):
                return None
            return self.start_execution(self.jobs[job], "scheduled/runtime", {}, scheduled=True)

    def cancel(self, execution: Execution) -> None:
        assert execution.pod is not None
        execution.pod.cancel()

    def execution_json(self, execution: Execution) -> dict:
        return {
            "id": execution.id,
            "job_name": execution.job,
            "status": execution.status,
            "type": execution.type,
            "start_time": execution.start_time,
            "end_time": execution.end_time,
            "started_by": execution.started_by,
            "logs_url": None,
            "message": execution.message,
            "op_id": execution.id,
            "deployment": {
                **{
                    k: v for k, v in execution.deployment.items() if k not in ("last_deployed_date", "last_deployed_by")
                },
                "deployed_by": "user",
                "deployed_date": execution.deployment.get("last_deployed_date"),
            },
        }


def judge_builder(exit_code: int, log: str) -> tuple[str, str]:
    """How the service judges a builder (DeploymentNotificationHelper.verifyBuilderResult)."""
    if exit_code == 0:
        return "success", ""
    marker = ">requirements_failed<"
    if marker in log:
        parts = log.split(marker)
        return "user_error", parts[len(parts) - 2] if len(parts) > 3 else ""
    if ">data-job-not-found<" in log or "failed to get files used from context" in log:
        return "user_error", "data job not found"
    return "platform_error", ""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class _Handler(BaseHTTPRequestHandler):
    state: TestControlService

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PATCH(self):
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.state.requests.append((method, url.path, dict(self.headers)))
        if url.path.startswith("/data-jobs.git/"):
            return self._git_file(url.path)
        from tests.support.control_service_api import answer

        if self.state.token and self.headers.get("Authorization") != f"Bearer {self.state.token}":
            code, payload, headers = 401, None, {}
        else:
            code, payload, headers = answer(self.state, method, url.path, parse_qs(url.query), body, self.headers)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(code)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _git_file(self, path: str) -> None:
        """The repository over git's dumb HTTP protocol, behind basic authentication as a git server has it."""
        expected = "Basic " + base64.b64encode(f"{GIT_USER}:{GIT_PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="data-jobs"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        relative = path.removeprefix("/data-jobs.git/")
        file = (self.state.repo / ".git" / relative).resolve()
        if not str(file).startswith(str((self.state.repo / ".git").resolve())) or not file.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = file.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
