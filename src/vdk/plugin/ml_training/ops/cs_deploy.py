"""`vdk deploy` of an ml-training job through the VDK Control Service, with VDK credentials only: no kube context,
no registry login. Taken when the user's VDK configuration points at a Control Service whose operator set it up for
ml-training (its supported Python versions list the entry `ml_training_control_service_entry`, default
`ml-training`); otherwise `vdk deploy` goes to Kubernetes as before (ops/deploy.py), saying why.

    smoke run here -> the job's files uploaded (with its own commit: control_service/upload.py) -> the job's
    schedule (`[job] schedule_cron`) -> the deployment, built by the service's builder of that entry (this plugin's
    builder, ops/cs_build.py) -> an execution started (the launcher in the data-job pod, ops/cs_launch.py)

The service builds asynchronously: the deploy waits until the deployment shows the uploaded version (the service
says nothing else of a build; a failed build is told to the job's contacts), then starts an execution. Its run is
named after the execution, so its name is known at once. `vdk execute --logs/--show/--cancel` and `vdk list/show`
of the Control Service CLI then work for it as for a data job.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.control_service.endpoint import Endpoint
from vdk.plugin.ml_training.control_service.endpoint import access_token
from vdk.plugin.ml_training.control_service.endpoint import find_endpoint
from vdk.plugin.ml_training.control_service.rest import FINISHED
from vdk.plugin.ml_training.control_service.rest import ControlService
from vdk.plugin.ml_training.control_service.rest import ControlServiceError
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.config_file import read_config
from vdk.plugin.ml_training.job.keys import key
from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.job.settings import setting
from vdk.plugin.ml_training.ops.configuration import or_environment
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.source import audit

ENTRY = key("control_service_entry").setting_name
# The Control Service's rule for a data job's name (ApiConstraintError): 6 to 50 characters.
SERVICE_JOB_NAME = re.compile(r"^[a-z][a-z0-9-]{5,49}$")
# How long a deploy waits for the service's builder: its builderTimeoutSeconds (1800 by default) and a margin for
# the builder's pod to be scheduled.
DEPLOY_WAIT_SECONDS = 2100
POLL_SECONDS = 3.0
SAY_EVERY_SECONDS = 30.0
STARTED_BY = "vdk-ml-training/deploy"  # the service records "<started_by>/<user>"
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) ")
_CONTACTS = (
    "notified_on_job_failure_user_error",
    "notified_on_job_failure_platform_error",
    "notified_on_job_success",
    "notified_on_job_deploy",
)


@dataclass(frozen=True)
class ServiceRoute:
    """Whether a deploy goes through the Control Service (`through`), and why in one line."""

    endpoint: Endpoint | None
    entry: str
    through: bool
    why: str
    supported: tuple[str, ...] = ()
    answered: bool = False  # the service answered (its supported Python versions are known)


@dataclass(frozen=True)
class ServiceDeployResult:
    """A deploy through the Control Service: the version it deployed and, unless `--build-only`, the execution it
    started and the run that execution names."""

    job_name: str
    team: str
    url: str
    version: str
    entry: str
    provenance: audit.Provenance
    schedule: str | None
    execution: str | None = None
    run: str | None = None

    @property
    def started(self) -> bool:
        return self.execution is not None

    def to_dict(self) -> dict:
        return {
            "job_name": self.job_name,
            "job_team": self.team,
            "control_service": self.url,
            "job_version": self.version,
            "python_version": self.entry,
            "schedule_cron": self.schedule,
            "execution_id": self.execution,
            "run": self.run,
            "git_commit": self.provenance.git_commit,
            "git_dirty": self.provenance.git_dirty if self.provenance.git_commit else None,
            "started": self.started,
        }


@checked
def service_route(
    job_dir: Any, team: str | None, rest_api_url: str | None = None, configuration: ConfigurationLike | None = None
) -> ServiceRoute:
    """Through the Control Service or not: its URL is set, it answers, and it lists the ml-training entry. Its
    refusal of the user's credentials is an error (they meant to use it); a service out of reach is not."""
    entry = str(setting(or_environment(configuration), ENTRY, job_dir)[0] or key("control_service_entry").default)
    endpoint = find_endpoint(rest_api_url)
    if endpoint is None:
        return ServiceRoute(None, entry, False, "no VDK Control Service URL is set")
    if not team:
        return ServiceRoute(
            endpoint, entry, False, f"the job has no team, which the Control Service at {endpoint.url} needs"
        )
    try:
        with ControlService(endpoint, access_token(), retry_waits=()) as service:  # a probe: asked once
            info = service.info(team)
    except ControlServiceError as e:
        if e.status in (401, 403):
            raise
        return ServiceRoute(
            endpoint, entry, False, f"the Control Service at {endpoint.url} cannot be asked: {e.problem}"
        )
    supported = tuple(str(v) for v in info.get("supported_python_versions") or ())
    if entry in supported:
        why = f"the Control Service at {endpoint.url} has the entry {entry}"
        return ServiceRoute(endpoint, entry, True, why, supported, answered=True)
    return ServiceRoute(
        endpoint, entry, False,
        f"the Control Service at {endpoint.url} is not set up for ml-training jobs: its supported Python versions "
        f"({', '.join(supported) or 'none'}) lack the entry {entry} ({ENTRY})",
        supported,
        answered=True,
    )  # fmt: skip


def check_for_service(spec: MLJobSpec) -> str:
    """The job's team, once its name and kind are checked against what the Control Service takes."""
    if not SERVICE_JOB_NAME.match(spec.name):
        raise MLTrainingError(
            f"the VDK Control Service takes job names of 6 to 50 characters (lower-case letters, digits and '-', "
            f"starting with a letter); {spec.name!r} is not one",
            "deploy it under another name with -n NAME, or rename the job's directory",
        )
    if spec.sweep is not None:
        raise JobConfigError(
            spec.config_path,
            "a sweep is not deployed through the VDK Control Service yet",
            "deploy it with a kube context and a registry (without the Control Service's URL for this command)",
            "ml-training.sweep",
        )
    if not spec.team:
        raise MLTrainingError(
            f"{spec.name} has no team: the Control Service keeps jobs by team",
            f"set `team = ...` under [owner] in {spec.config_path}, or deploy with -t TEAM",
        )
    return spec.team


@checked
def deploy_through_service(
    spec: MLJobSpec,
    route: ServiceRoute,
    *,
    reason: str | None = None,
    skip_smoke: bool = False,
    start: bool = True,
    arguments: dict[str, str] | None = None,
    reporter: Reporter | None = None,
    wait_seconds: float = DEPLOY_WAIT_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> ServiceDeployResult:
    """Smoke-check, upload, schedule, deploy and (with `start`) start an execution with `arguments` ([ml-training]
    keys for its run only). `reporter` is told the smoke run and each step (notes). Raises MLTrainingError; nothing
    is uploaded when the smoke check fails."""
    from vdk.plugin.ml_training.control_service.upload import sources_zip
    from vdk.plugin.ml_training.k8s.runs.identity import run_name_for

    assert route.endpoint is not None
    reporter = or_quiet(reporter)
    say = reporter.note
    team = check_for_service(spec)
    if not skip_smoke:
        _smoke(spec, reporter)
    provenance = audit.collect(spec.job_dir)
    archive = sources_zip(spec.job_dir, spec.name, provenance)
    schedule, contacts = _schedule_and_contacts(spec)
    with ControlService(route.endpoint, access_token(), say) as service:
        say(f"Uploading {spec.name} to the VDK Control Service at {service.url} (team {team}, {len(archive)} bytes)")
        version = service.upload_sources(team, spec.name, archive, reason)
        if version is None:
            say(f"Creating the job {spec.name} of team {team} there")
            service.create_job(team, spec.name, f"ml-training job {spec.name}")
            version = service.upload_sources(team, spec.name, archive, reason)
        if version is None:
            raise ControlServiceError(
                f"the VDK Control Service at {service.url} created {spec.name} but took no files for it",
                "deploy again; if it goes on, tell the Control Service's operator",
            )
        _update_job(service, team, spec.name, schedule, contacts)
        before = _deployed(service, team, spec.name)
        service.deploy(team, spec.name, version, route.entry)
        say(f"Deploying version {version[:12]} of {spec.name}: the Control Service's builder (builder-{spec.name}) "
            "builds its image")  # fmt: skip
        _wait_deployed(service, team, spec.name, version, before, wait_seconds, poll_seconds, say)
        say(f"Deployed {spec.name} version {version[:12]}" + (f", on schedule `{schedule}`" if schedule else ""))
        result = ServiceDeployResult(spec.name, team, service.url, version, route.entry, provenance, schedule)
        if not start:
            return result
        execution = service.start_execution(team, spec.name, STARTED_BY, dict(arguments or {}))
    run = run_name_for(spec.kubernetes_name(), execution)
    return ServiceDeployResult(
        spec.name, team, route.endpoint.url, version, route.entry, provenance, schedule, execution, run
    )


def _smoke(spec: MLJobSpec, reporter: Reporter) -> None:
    from vdk.plugin.ml_training.ops.deploy_checks import nothing_done
    from vdk.plugin.ml_training.ops.local_run import smoke_check

    reporter.note("Pre-flight: smoke check (skip with --skip-smoke)")
    again = f"deploy again (`vdk deploy -p {spec.job_dir}`; --skip-smoke if the smoke check itself is wrong)"
    error = smoke_check(spec, again, reporter)
    if error is not None:
        raise nothing_done(error)


def _schedule_and_contacts(spec: MLJobSpec) -> tuple[str | None, dict[str, list[str]] | None]:
    """`[job] schedule_cron` and the [contacts] of config.ini (VDK's own keys, sent as `vdk deploy` of a data job
    sends them); None where config.ini has none."""
    parser = read_config(spec.job_dir)
    sections = {name.lower(): name for name in parser.sections()}
    schedule = None
    if "job" in sections:
        schedule = parser.get(sections["job"], "schedule_cron", fallback="").strip() or None
    contacts = None
    if "contacts" in sections:
        section = parser[sections["contacts"]]
        contacts = {name: [a.strip() for a in section.get(name, "").split(",") if a.strip()] for name in _CONTACTS}
    return schedule, contacts


def _update_job(
    service: ControlService, team: str, job: str, schedule: str | None, contacts: dict[str, list[str]] | None
) -> None:
    current = service.get_job(team, job) or {}
    config = dict(current.get("config") or {})
    config["schedule"] = {"schedule_cron": schedule or ""}
    if contacts is not None:
        config["contacts"] = contacts
    body = {"job_name": job, "team": team, "description": current.get("description") or "", "config": config}
    service.update_job(team, job, body)


def _deployed(service: ControlService, team: str, job: str) -> tuple[str, str] | None:
    """(version, when deployed) of the job's deployment, None when it has none."""
    for deployment in service.deployments(team, job):
        return str(deployment.get("job_version") or ""), str(deployment.get("last_deployed_date") or "")
    return None


def _wait_deployed(
    service: ControlService,
    team: str,
    job: str,
    version: str,
    before: tuple[str, str] | None,
    wait_seconds: float,
    poll_seconds: float,
    say: Say,
) -> None:
    """Until the deployment shows `version`, deployed after `before` (the same version deployed again is built
    again); an error after `wait_seconds`."""
    started = time.monotonic()
    said = started
    while True:
        now = _deployed(service, team, job)
        if now is not None and now[0] == version and now != before:
            return
        waited = time.monotonic() - started
        if waited > wait_seconds:
            raise MLTrainingError(
                f"the VDK Control Service did not deploy version {version[:12]} of {job} within {waited:.0f} s: its "
                f"builder (the Kubernetes Job builder-{job}) failed, or has not ended",
                "the job's contacts (notified_on_job_deploy in [contacts]) get the builder's result; an operator reads "
                f"its log with `kubectl logs job/builder-{job}` in the Control Service's namespace. Deploy again when "
                "it is fixed",
            )
        if time.monotonic() - said >= SAY_EVERY_SECONDS:
            said = time.monotonic()
            say(f"Waiting for the Control Service's builder of {job} ({waited:.0f} s)")
        time.sleep(poll_seconds)


@checked
def follow_execution(
    endpoint: Endpoint,
    team: str,
    job: str,
    execution: str,
    reporter: Reporter | None = None,
    poll_seconds: float = POLL_SECONDS,
) -> dict:
    """The execution's log as the Control Service serves it (its timestamps taken off), each line told to
    `reporter.execution_line` until the execution ends; returns the execution as last read (its `status`)."""
    line = or_quiet(reporter).execution_line
    printed: list[str] = []
    with ControlService(endpoint, access_token()) as service:
        while True:
            state = service.execution(team, job, execution)
            lines = [_TIMESTAMP.sub("", text) for text in service.logs(team, job, execution).splitlines()]
            if lines[: len(printed)] != printed:  # a new pod of the execution: its log starts again
                line("(the execution's pod was started again)")
                printed = []
            for text in lines[len(printed) :]:
                line(text)
            printed = lines
            if str(state.get("status") or "") in FINISHED:
                return state
            time.sleep(poll_seconds)
