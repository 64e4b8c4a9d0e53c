"""The VDK Control Service's REST API, the requests its CLI (vdk-control-cli) sends, and its answers read as its
server really sends them: errors as `{what, why, consequences, countermeasures}`, many "not found" answers with an
empty body, 202 for what it does asynchronously (a deployment, an execution), the execution's id in the
`Location` of its start. Every failure is an MLTrainingError whose fix fits the request that failed.

Requests that change nothing (and PUT, DELETE) are sent again after a connection failure or a 5xx, a few times
within seconds (the CLI's urllib3 retries them for ten minutes); a POST never is.

    service = ControlService(endpoint, access_token())
    sha = service.upload_sources("team-a", "mnist-ddp", zip_bytes, reason="nightly")
"""

from __future__ import annotations

import json
import posixpath
import secrets
import time
from collections.abc import Callable
from typing import Any

import requests

from vdk.plugin.ml_training.control_service.endpoint import LOGIN_FIX
from vdk.plugin.ml_training.control_service.endpoint import Endpoint
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

# The deployment id the Control Service CLI uses; the server has one deployment per job.
DEPLOYMENT = "production"
# How an execution ended or goes on, as the server's DataJobExecution says it.
SUBMITTED, RUNNING, SUCCEEDED = "submitted", "running", "succeeded"
FINISHED = frozenset({SUCCEEDED, "cancelled", "skipped", "user_error", "platform_error"})
RETRIED_METHODS = ("GET", "PUT", "DELETE")
RETRY_WAITS = (1.0, 2.0, 4.0)
TIMEOUT = (10.0, 120.0)  # (connect, read) seconds


class ControlServiceError(MLTrainingError):
    """A request the Control Service refused or did not answer: `status` (None: no answer), and the server's own
    `what` when it sent an error body."""

    def __init__(self, problem: str, fix: str, status: int | None = None, what: str | None = None):
        self.status = status
        self.what = what
        super().__init__(problem, fix)


def server_message(body: bytes | str | None) -> dict[str, str] | None:
    """The server's error body ({what, why, consequences, countermeasures}), None when it sent none (an empty 404,
    Spring's own error JSON, a proxy's HTML)."""
    if not body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("what"), str):
        return None
    return {key: str(data.get(key) or "").strip() for key in ("what", "why", "consequences", "countermeasures")}


def refusal(
    url: str, action: str, status: int, body: bytes | str | None, fix: str | None = None
) -> ControlServiceError:
    """What a user reads of a non-2xx answer to `action` ("upload the sources of mnist-ddp"): the server's what and
    why when it sent them; `fix` when the caller knows the situation better than the server's countermeasures."""
    message = server_message(body)
    where = f"the VDK Control Service at {url}"
    if status == 401:
        return ControlServiceError(
            f"{where} did not accept your credentials to {action} (HTTP 401)", fix or LOGIN_FIX, status
        )
    if status == 403 and message is None:
        return ControlServiceError(
            f"{where} does not allow you to {action} (HTTP 403)",
            fix or "ask the Control Service's operator for access to the job's team",
            status,
        )
    if message is not None:
        why = f": {message['why']}" if message["why"] else ""
        return ControlServiceError(
            f"{where} refused to {action} (HTTP {status}): {message['what']}{why}",
            fix or message["countermeasures"] or "see the Control Service's answer above",
            status,
            message["what"],
        )
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    said = f": {' '.join(text.split())[:200]}" if text.strip() else " with no explanation"
    if status >= 500:
        default = (
            "try again in a few minutes; if it goes on, tell the Control Service's operator (its log has the request)"
        )
    else:
        default = "check the job's name and team (`vdk list` shows them)"
    return ControlServiceError(f"{where} could not {action} (HTTP {status}){said}", fix or default, status)


class ControlService:
    """A session with one Control Service (its URL from endpoint.find_endpoint, the token from access_token)."""

    def __init__(
        self,
        endpoint: Endpoint,
        token: str | None = None,
        say: Callable[[str], None] | None = None,
        retry_waits: tuple[float, ...] = RETRY_WAITS,
    ):
        self.endpoint = endpoint
        self.url = endpoint.url
        self.say = say or (lambda text: None)
        self.retry_waits = retry_waits
        self.session = requests.Session()
        self.session.verify = endpoint.verify_ssl
        self.session.headers["X-OPID"] = secrets.token_hex(8)  # the server logs it with the request
        self.session.headers["User-Agent"] = f"{PROJECT} (vdk-control-cli compatible)"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> ControlService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the requests ---------------------------------------------------------------------------

    def info(self, team: str) -> dict:
        """GET /data-jobs/for-team/{team}/info: the API version and the supported Python versions' keys."""
        answer = self._send("GET", f"/data-jobs/for-team/{team}/info", f"read the service's info for team {team}")
        return _json(answer, {})

    def upload_sources(self, team: str, job: str, archive: bytes, reason: str | None) -> str | None:
        """POST .../sources: the job's files (a zip whose one folder is the job); the commit that holds them. None:
        the job does not exist there yet (an empty 404)."""
        answer = self._send(
            "POST",
            f"{_job_path(team, job)}/sources",
            f"upload the files of {job}",
            params={"reason": reason or f"vdk deploy of {job}"},
            data=archive,
            headers={"Content-Type": "application/octet-stream"},
            missing=lambda: None,
        )
        if answer is None:
            return None
        sha = _json(answer, {}).get("version_sha")
        if not sha:
            raise ControlServiceError(
                f"the VDK Control Service at {self.url} took the files of {job} but named no version of them",
                "tell the Control Service's operator: its sources API answered without `version_sha`",
            )
        return str(sha)

    def create_job(self, team: str, job: str, description: str) -> bool:
        """POST /jobs: the data job `job` of `team`; False when it exists already (409)."""
        body = {"job_name": job, "team": team, "description": description, "config": {"schedule": {}}}
        answer = self._send(
            "POST", f"/data-jobs/for-team/{team}/jobs", f"create the job {job}", params={"name": job}, json=body,
            conflict=lambda: None,
        )  # fmt: skip
        return answer is not None

    def get_job(self, team: str, job: str) -> dict | None:
        answer = self._send("GET", _job_path(team, job), f"read the job {job}", missing=lambda: None)
        return None if answer is None else _json(answer, {})

    def update_job(self, team: str, job: str, body: dict) -> None:
        self._send("PUT", _job_path(team, job), f"update the job {job}", json=body)

    def deploy(self, team: str, job: str, version: str, python_version: str) -> None:
        """POST .../deployments: the version built by the builder of the `python_version` entry, and scheduled."""
        body = {"job_version": version, "python_version": python_version}
        self._send(
            "POST", f"{_job_path(team, job)}/deployments", f"deploy the version {version[:12]} of {job}", json=body
        )

    def deployments(self, team: str, job: str) -> list[dict]:
        answer = self._send(
            "GET", f"{_job_path(team, job)}/deployments", f"read the deployment of {job}", missing=lambda: None
        )
        data = [] if answer is None else _json(answer, [])
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def start_execution(self, team: str, job: str, started_by: str, args: dict[str, Any]) -> str:
        """POST .../deployments/production/executions: the id of the execution the service started."""
        answer = self._send(
            "POST",
            f"{_job_path(team, job)}/deployments/{DEPLOYMENT}/executions",
            f"start an execution of {job}",
            json={"started_by": started_by, "args": args},
        )
        location = answer.headers.get("Location") or ""
        execution = posixpath.basename(location.rstrip("/"))
        if not execution:
            raise ControlServiceError(
                f"the VDK Control Service at {self.url} started an execution of {job} but did not say its id",
                f"see its executions with `vdk execute --list -n {job} -t {team}`",
            )
        return execution

    def execution(self, team: str, job: str, execution: str) -> dict:
        return _json(
            self._send("GET", f"{_job_path(team, job)}/executions/{execution}", f"read execution {execution}"), {}
        )

    def logs(self, team: str, job: str, execution: str) -> str:
        answer = self._send(
            "GET", f"{_job_path(team, job)}/executions/{execution}/logs", f"read the log of execution {execution}"
        )
        return str(_json(answer, {}).get("logs") or "")

    # --- sending --------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        action: str,
        *,
        missing: Callable[[], Any] | None = None,
        conflict: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """One request; `missing()` is the answer to an empty 404 (else an error), `conflict()` that to a 409."""
        waits = list(self.retry_waits) if method in RETRIED_METHODS else []
        while True:
            try:
                answer = self.session.request(method, self.url + path, timeout=TIMEOUT, **kwargs)
            except requests.RequestException as e:
                if waits:
                    self._retrying(action, type(e).__name__, waits)
                    continue
                raise ControlServiceError(
                    f"cannot reach the VDK Control Service at {self.url} ({self.endpoint.origin}) to {action}: "
                    f"{type(e).__name__}: {e}",
                    f"check the URL ({self.endpoint.origin}) and that this machine reaches it",
                ) from None
            if answer.status_code >= 500 and waits:
                self._retrying(action, f"HTTP {answer.status_code}", waits)
                continue
            if answer.ok:
                return answer
            if answer.status_code == 404 and missing is not None and not answer.content.strip():
                return missing()
            if answer.status_code == 409 and conflict is not None:
                return conflict()
            raise refusal(self.url, action, answer.status_code, answer.content)

    def _retrying(self, action: str, why: str, waits: list[float]) -> None:
        wait = waits.pop(0)
        self.say(f"note: the Control Service did not {action} ({why}); asking again in {wait:g} s")
        time.sleep(wait)


def _job_path(team: str, job: str) -> str:
    return f"/data-jobs/for-team/{team}/jobs/{job}"


def _json(answer: requests.Response, empty: Any) -> Any:
    if not answer.content.strip():
        return empty
    try:
        return answer.json()
    except ValueError:
        raise ControlServiceError(
            f"the VDK Control Service answered {answer.request.method} {answer.url} with something other than JSON",
            "check that the URL is the Control Service's REST API (not its UI or a proxy's page)",
            answer.status_code,
        ) from None
