"""The routes of the test Control Service (tests/support/control_service.py): the paths vdk-control-cli and this
plugin send, each answered with the real server's codes and bodies (research-37.md, sections 1, 2 and 5)."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.control_service import ACTIVE
from tests.support.control_service import NAME_RULE
from tests.support.control_service import Job
from tests.support.control_service import TestControlService
from tests.support.control_service import error
from tests.support.control_service import job_not_found
from tests.support.control_service import unsupported_python

Answer = tuple[int, Any, dict]
_TEAM = r"/data-jobs/for-team/(?P<team>[^/]+)"
_JOB = _TEAM + r"/jobs/(?P<job>[^/]+)"
STATUSES = ("submitted", "running", "succeeded", "cancelled", "skipped", "user_error", "platform_error")


def answer(state: TestControlService, method: str, path: str, query: dict, body: bytes, headers: Any) -> Answer:
    for pattern, route_method, route in _ROUTES:
        m = re.fullmatch(pattern, path)
        if m and method == route_method:
            with state.lock:
                return route(state, query=query, body=body, headers=headers, **m.groupdict())
    # Spring Boot's own answer to a path no controller has
    return 404, {"timestamp": "2025-05-13T00:00:00.000+00:00", "status": 404, "error": "Not Found", "path": path}, {}


def _json(body: bytes) -> Any:
    return json.loads(body or b"null")


def _bad_request(parameter: str, constraint: str, value: Any) -> Answer:
    return 400, error(
        f"Parameter {parameter} is not valid.",
        f"It must be {constraint}, but was {value}.",
        "API call fails with 400 BAD REQUEST.",
        "Provide a valid value and try again.",
    ), {}  # fmt: skip


def _info(state, team, **_):
    return 200, {"api_version": "1.0", "supported_python_versions": list(state.supported)}, {}


def _create_job(state, team, query, body, **_):
    name = (query.get("name") or [""])[0] or (_json(body) or {}).get("job_name", "")
    if not re.match(NAME_RULE, name):
        return _bad_request("name", "matching ^[a-z][a-z0-9-]{5,49}$", name)
    if name in state.jobs:
        return 409, None, {}  # empty, as the server's
    data = _json(body) or {}
    state.jobs[name] = Job(name, team, data.get("description") or "", data.get("config") or {"schedule": {}})
    return 201, None, {"Location": f"{state.url}/data-jobs/for-team/{team}/jobs/{name}"}


def _list_jobs(state, team, query, **_):
    jobs = [j for j in state.jobs.values() if j.team == team]
    content = []
    for job in jobs:
        deployments = []
        if job.deployment:
            d = job.deployment
            deployments.append(
                {"enabled": True, "status": "SUCCESS", "jobVersion": d["job_version"],
                 "lastDeployedBy": d["last_deployed_by"], "lastDeployedDate": d["last_deployed_date"]}
            )  # fmt: skip
        schedule = (job.config.get("schedule") or {}).get("schedule_cron") or ""
        content.append(
            {"jobName": job.name, "config": {"team": job.team, "description": job.description,
             "schedule": {"scheduleCron": schedule}}, "deployments": deployments}
        )  # fmt: skip
    return 200, {"data": {"content": content, "totalItems": len(content), "totalPages": 1}}, {}


def _job(state, team, job, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, None, {}
    return 200, {"job_name": found.name, "description": found.description, "config": found.config,
                 "team": found.team}, {}  # fmt: skip


def _update_job(state, team, job, body, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, None, {}
    data = _json(body) or {}
    if data.get("job_name") != job:
        return _bad_request("job_name", f"equal to {job}", data.get("job_name"))
    found.config = data.get("config") or {}
    found.description = data.get("description") or ""
    return 200, None, {}


def _sources(state, team, job, query, body, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, None, {}
    return 200, {"version_sha": state.upload(job, body, (query.get("reason") or [""])[0])}, {}


def _deploy(state, team, job, body, **_):
    data = _json(body) or {}
    version = data.get("python_version")
    if version is not None and version not in state.supported:  # checked before the job is looked up
        return 409, unsupported_python(version, sorted(state.supported)), {}
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, None, {}
    state.deploy(found, data["job_version"], version or next(iter(state.supported)))
    return 202, None, {}


def _deployments(state, team, job, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, None, {}
    return 200, [found.deployment] if found.deployment else [], {}


def _start(state, team, job, body, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, job_not_found(job), {}
    if found.deployment is None:
        return 404, error(
            f"The Data Job '{job}' is not deployed.", "The Data Job must be deployed.",
            "Operation cannot complete since it expects the data job to have a deployment.",
            "Deploy the Data Job and try again.",
        ), {}  # fmt: skip
    if any(e.job == job and e.status in ACTIVE for e in state.executions.values()):
        return 409, error(
            f"The Data Job '{job}' is currently being executed.",
            "Simultaneous execution of the same Data Job are not allowed.",
            "The Data Job will not be started. The ongoing Data Job execution will continue to run.",
            "Wait for the current Data Job execution to complete or cancel it and try again.",
        ), {}  # fmt: skip
    data = _json(body) or {}
    execution = state.start_execution(found, f"{data.get('started_by') or 'manual'}/user", data.get("args") or {})
    location = f"{state.url}/data-jobs/for-team/{team}/jobs/{job}/executions/{execution.id}"
    return 202, None, {"Location": location}


def _execution_missing(execution: str) -> Answer:
    return 404, error(
        f"The Data Job execution '{execution}' does not exist.",
        "Likely the Data Job execution have not started or it has expired.",
        "The Data Job execution will not be returned.",
        "Provide a Data Job execution that already exists or trigger one and try again.",
    ), {}  # fmt: skip


def _executions(state, team, job, query, **_):
    found = state.jobs.get(job)
    if found is None or found.team != team:
        return 404, job_not_found(job), {}
    wanted = query.get("execution_status") or []
    for status in wanted:
        if status.lower() not in STATUSES:
            return 404, error(f"The Execution Status '{status}' is not valid.", "...", "...", "..."), {}
    items = [e for e in state.executions.values() if e.job == job and (not wanted or e.status in wanted)]
    return 200, [state.execution_json(e) for e in items], {}


def _execution(state, team, job, execution, **_):
    found = state.executions.get(execution)
    if found is None or found.job != job:
        return _execution_missing(execution)
    return 200, state.execution_json(found), {}


def _logs(state, team, job, execution, **_):
    found = state.executions.get(execution)
    if found is None or found.job != job:
        return _execution_missing(execution)
    return 200, {"logs": state.log(execution)}, {}


def _cancel(state, team, job, execution, **_):
    found = state.executions.get(execution)
    if found is None or found.job != job:
        return _execution_missing(execution)
    if found.status not in ACTIVE:
        return 400, error(
            f"The Data Job execution '{execution}' cannot be cancelled.",
            "Specified data job execution is not in running or submitted state.",
            "API request to cancel Data Job Execution failed.", "Wait for the execution to end.",
        ), {}  # fmt: skip
    state.cancel(found)
    return 200, None, {}


_ROUTES = [
    (_TEAM + "/info", "GET", _info),
    (_TEAM + "/jobs", "POST", _create_job),
    (_TEAM + "/jobs", "GET", _list_jobs),
    (_JOB, "GET", _job),
    (_JOB, "PUT", _update_job),
    (_JOB + "/sources", "POST", _sources),
    (_JOB + "/deployments", "POST", _deploy),
    (_JOB + "/deployments", "GET", _deployments),
    (_JOB + "/deployments/production/executions", "POST", _start),
    (_JOB + "/executions", "GET", _executions),
    (_JOB + "/executions/(?P<execution>[^/]+)", "GET", _execution),
    (_JOB + "/executions/(?P<execution>[^/]+)/logs", "GET", _logs),
    (_JOB + "/executions/(?P<execution>[^/]+)", "DELETE", _cancel),
]
