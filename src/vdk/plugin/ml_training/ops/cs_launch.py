"""The launcher: `vdk run` of an ml-training job in the VDK Control Service's data-job pod (its operator sets
`ml_training_launcher = true` there). Each execution of the job (a tick of its schedule, `vdk execute --start`, a
deploy) is one such pod; the launcher creates the job's run on the cluster with the pod's own credentials, follows
it into the pod's log (which is the execution's log: rank 0's output, the last lines of every rank that fails, how
the run ended) and ends with the run's outcome (`LaunchOutcome`), which the Control Service reads from the
termination message.

- The run is named after the execution (k8s/runs/identity.run_name_for): the Control Service's retries of the pod
  (a restarted container, a replaced pod) find the run their first attempt created and follow it; no second run.
- One run of a job at a time: an execution that finds another execution's run still going starts none (Skipped,
  and its log says which run), as VDK never runs two executions of a data job at once.
- `if_changed = true` in [ml-training]: a scheduled execution starts no run when nothing changed since the job's
  last successful run (Skipped, and its log says since which run), as `vdk deploy --if-changed` does.
- The data-job template's deadline (`activeDeadlineSeconds`, k8s/own_execution.py): the launcher leaves before
  it, saying that the run goes on; it is neither stopped nor started again by the next execution, which reports it.
- A cancelled execution (its Job deleted) deletes the run; a pod stopped otherwise leaves it to the next attempt.

Every outcome ends the process normally with its status in the termination message (the Control Service's server
does not recognise a failed Kubernetes Job at its last release: a non-zero exit would be retried, then read as
still running): `Success`, `User error` (the run failed, the job's configuration is wrong, the deadline came),
`Platform error` (the cluster could not be reached or refused the launcher), `Skipped`, `Cancelled`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.config_file import CONFIG_FILE
from vdk.plugin.ml_training.job.config_file import closest
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.overrides import parse_overrides
from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.source import audit

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.own_execution import OwnJob
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
    from vdk.plugin.ml_training.ops.follow import FollowedRun

# How an execution ended, as the Control Service reads the `status` of the container's termination message.
SUCCESS = "Success"
USER_ERROR = "User error"
PLATFORM_ERROR = "Platform error"
SKIPPED = "Skipped"
CANCELLED = "Cancelled"
# The execution's arguments that are not [ml-training] keys (`vdk execute --start --arguments '{...}'`).
ARGS_ARGUMENT = "args"


@dataclass(frozen=True)
class Execution:
    """Which execution this launcher is: the Control Service's ids (vdk's EXECUTION_ID and ATTEMPT_ID, the latter
    the pod's name), the job and team, and the arguments it was started with ({key of [ml-training]: value})."""

    execution_id: str
    attempt_id: str
    job_name: str
    team: str | None
    arguments: dict[str, Any] = field(default_factory=dict)

    def overrides(self) -> dict[str, str]:
        """The arguments as keys of [ml-training] for this run only (`--set`), `args` the entrypoint's."""
        if not isinstance(self.arguments, dict):
            raise MLTrainingError(
                f"the execution's arguments are not a JSON object of [ml-training] keys: {self.arguments!r}",
                'start it with `vdk execute --start -n JOB --arguments \'{"nodes": "2", "args": "--lr 1e-3"}\'`',
            )
        for name in self.arguments:
            if name not in KEYS:
                close = closest(name, list(KEYS))
                raise MLTrainingError(
                    f"the execution's arguments name {name!r}, which is not a key of [ml-training]",
                    f"did you mean {close!r}?" if close else f"the keys are: {', '.join(KEYS)}",
                )
        args = self.arguments.get(ARGS_ARGUMENT)
        sets = [f"{key}={_text(value)}" for key, value in self.arguments.items() if key != ARGS_ARGUMENT]
        return parse_overrides(sets, None if args is None else _text(args))


@dataclass(frozen=True)
class LaunchOutcome:
    """How the execution ended (`status`: one of the statuses above), its run, why, in one line, and the run as
    followed to its end (None when it was not: skipped, cancelled, failed before, or the deadline came)."""

    status: str
    run: str | None
    why: str
    followed: FollowedRun | None = None

    @classmethod
    def interrupted(cls) -> LaunchOutcome:
        """The launcher was stopped (not cancelled): the platform's error; a new attempt follows the run."""
        return cls(PLATFORM_ERROR, None, "the launcher was stopped")


def job_directory(given: Path) -> Path:
    """The job's directory: in a job image, the code layer's (layout.JOB_DIR; the builder put `<job>/config.ini`
    there for the Control Service's `vdk run ./<job>`); elsewhere the one vdk was given."""
    image_job = Path(layout.JOB_DIR)
    return image_job if (image_job / CONFIG_FILE).is_file() else Path(given)


@checked
def launch_execution(
    execution_id: str,
    attempt_id: str,
    job_name: str,
    team: str | None,
    arguments: str | None,
    given: Path,
    configuration: ConfigurationLike | None = None,
    reporter: Reporter | None = None,
) -> LaunchOutcome:
    """`launch` of the execution vdk's ids name, started with `arguments` (its `--arguments` JSON); a problem with
    them is the user's error, said with its fix."""
    from vdk.plugin.ml_training.ops.configuration import or_environment

    reporter = or_quiet(reporter)
    try:
        execution = Execution(execution_id, attempt_id, job_name, team, parse_arguments(arguments))
    except MLTrainingError as e:
        return _failed(e, None, reporter.note)
    return launch(execution, job_directory(given), or_environment(configuration), reporter)


@checked
def launch(
    execution: Execution, job_dir: Path, configuration: ConfigurationLike, reporter: Reporter | None = None
) -> LaunchOutcome:
    """Start (or find again) the execution's run and follow it to its end, or to the launcher's deadline.
    `reporter` is told each step (notes), rank 0's lines (`log_line`) and each failed container (`rank_failed`):
    all of it belongs in the execution's log."""
    from vdk.plugin.ml_training.k8s.runs.identity import run_name_for
    from vdk.plugin.ml_training.ops.deploy import deploy_spec

    reporter = or_quiet(reporter)
    say = reporter.note
    try:
        spec = deploy_spec(
            job_dir,
            name=execution.job_name,
            team=execution.team,
            configuration=configuration,
            overrides=execution.overrides(),
        )
        if spec.sweep is not None:
            raise JobConfigError(
                spec.config_path,
                "a sweep is not started through the VDK Control Service yet",
                "deploy the sweep with a kube context (`vdk deploy -p JOB` without the Control Service's URL)",
                "ml-training.sweep",
            )
        run_name = run_name_for(spec.kubernetes_name(), execution.execution_id)
    except MLTrainingError as e:
        return _failed(e, None, say)
    say(f"vdk-ml-training launcher: execution {execution.execution_id} of {spec.name}, run {run_name}")
    own_client = None
    try:
        own_client, own = _own_job(spec, execution, say)
        client, summary = _attach_or_start(spec, execution, run_name, own, own_client, say)
    except _Skip as skip:
        say(skip.why)
        return LaunchOutcome(SKIPPED, skip.run, skip.why)
    except MLTrainingError as e:
        return _failed(e, run_name, say)
    except KeyboardInterrupt:
        if _cancelled(own_client, execution):
            say(f"execution {execution.execution_id} was cancelled before run {run_name} started: nothing was left")
            return LaunchOutcome(CANCELLED, None, "cancelled")
        raise
    return _follow(client, summary, own, own_client, execution, reporter)


def _follow(
    client: KubeClient,
    summary: RunSummary,
    own: OwnJob | None,
    own_client: KubeClient | None,
    execution: Execution,
    reporter: Reporter,
) -> LaunchOutcome:
    from vdk.plugin.ml_training.k8s.own_execution import leave_margin
    from vdk.plugin.ml_training.ops.follow import FollowTimeUp
    from vdk.plugin.ml_training.ops.follow import follow_run

    say = reporter.note
    leave_at = own.leave_at if own is not None else None
    try:
        followed = follow_run(client, summary, reporter, until=leave_at)
    except FollowTimeUp:
        deadline = own.deadline_seconds if own is not None and own.deadline_seconds else 0
        why = (
            f"the launcher's time is up (the data-job template's activeDeadlineSeconds, {deadline} s, less "
            f"{leave_margin(deadline):.0f} s): run {summary.name} goes on, neither stopped nor started again. The next "
            "execution of the job says how it ended (and starts none while it runs); with a kube context: "
            f"`vdk show -n {summary.job_name} -i {summary.name}`"
        )
        say(why)
        return LaunchOutcome(USER_ERROR, summary.name, why)
    except MLTrainingError as e:
        return _failed(e, summary.name, say)
    except KeyboardInterrupt:
        if not _cancelled(own_client, execution):
            say(f"the launcher was stopped, not cancelled: run {summary.name} goes on (a new attempt of the execution, "
                "or the next execution, follows it)")  # fmt: skip
            raise
        deleted = client.delete_run(summary.name, summary.backend)
        say(f"execution {execution.execution_id} was cancelled: run {summary.name} deleted ({', '.join(deleted)})")
        return LaunchOutcome(CANCELLED, summary.name, "cancelled")
    if followed.succeeded:
        return LaunchOutcome(SUCCESS, summary.name, f"run {summary.name} succeeded", followed)
    return LaunchOutcome(USER_ERROR, summary.name, f"run {summary.name} {followed.run.phase}", followed)


class LauncherSetupError(MLTrainingError):
    """What the launcher's pod lacks (its service account's token, its own pod): the platform's error."""


def _client(spec: MLJobSpec, namespace: str | None = None) -> KubeClient:
    """A client with the pod's credentials (its service account); their lack is the operator's to fix."""
    from vdk.plugin.ml_training.k8s.client import KubeClient

    try:
        return KubeClient(spec.kube_context, namespace)
    except MLTrainingError as e:
        raise LauncherSetupError(
            f"the launcher cannot reach the cluster: {e.problem}",
            "the Control Service's operator gives data-job pods a service account and its token "
            "(serviceAccountName, automountServiceAccountToken: true in the data-job template; "
            "docs/control-service-operator.md)",
        ) from None


class _Skip(Exception):
    def __init__(self, why: str, run: str | None = None):
        self.why = why
        self.run = run
        super().__init__(why)


def _own_job(spec: MLJobSpec, execution: Execution, say: Say) -> tuple[KubeClient, OwnJob | None]:
    """A client of the pod's own namespace, and the execution's Job there (None: none, or it cannot be read)."""
    from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
    from vdk.plugin.ml_training.k8s.own_execution import read_own_job

    own_client = _client(spec)
    try:
        own = read_own_job(own_client, execution.execution_id)
    except KubeApiError as e:
        say(f"note: the execution's Job {execution.execution_id} cannot be read ({e.problem}): no deadline is known")
        return own_client, None
    if own is None:
        say(f"note: no Job {execution.execution_id} in namespace {own_client.namespace}: no deadline is known")
    return own_client, own


def _attach_or_start(
    spec: MLJobSpec, execution: Execution, run_name: str, own: OwnJob | None, own_client: KubeClient, say: Say
) -> tuple[KubeClient, RunSummary]:
    client = _client(spec, spec.namespace)
    existing = _existing(client, run_name)
    if existing is not None:
        say(f"re-attached to run {run_name}: an earlier attempt of execution {execution.execution_id} started it")
        return client, existing
    _check_alone(client, spec, run_name, say)
    provenance = audit.read_uploaded(spec.job_dir) or audit.collect(spec.job_dir)
    return _start(spec, execution, run_name, own, own_client, provenance, say)


def _existing(client: KubeClient, run_name: str) -> RunSummary | None:
    from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
    from vdk.plugin.ml_training.k8s.runs.summary import summarize

    try:
        return summarize(client.get_run(run_name))
    except KubeApiError as e:
        if e.status == 404 and not e.not_served:
            return None
        raise


def _check_alone(client: KubeClient, spec: MLJobSpec, run_name: str, say: Say) -> None:
    """Skip when another run of the job goes on; say how the job's last run ended."""
    from vdk.plugin.ml_training.ops.deploy_changes import previous_runs

    runs = [r for r in previous_runs(client, spec) if r.name != run_name]
    going = [r for r in runs if not r.finished]
    if going:
        raise _Skip(
            f"run {going[0].name} of {spec.name} is still {going[0].phase.lower()}: this execution starts no "
            "second run (one run of a job at a time; it is skipped)",
            going[0].name,
        )
    if runs:
        say(f"the job's last run, {runs[0].name}, {runs[0].phase.lower()}")


def _start(
    spec: MLJobSpec,
    execution: Execution,
    run_name: str,
    own: OwnJob | None,
    own_client: KubeClient,
    provenance: audit.Provenance,
    say: Say,
) -> tuple[KubeClient, RunSummary]:
    from vdk.plugin.ml_training.image.code_manifest import code_manifest
    from vdk.plugin.ml_training.k8s.own_execution import own_image
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
    from vdk.plugin.ml_training.k8s.runs.summary import summarize
    from vdk.plugin.ml_training.layout import JobImage
    from vdk.plugin.ml_training.ops import deploy_checks
    from vdk.plugin.ml_training.ops.deploy_plan import plan_run

    image = own_image(own_client, execution.attempt_id, spec.name)
    if image is None:
        raise LauncherSetupError(
            f"the launcher's pod {execution.attempt_id} is not in namespace {own_client.namespace}: the image to run "
            "is not known",
            "run the launcher as the VDK Control Service does (its data-job pod: ATTEMPT_ID is the pod's name)",
        )
    target = deploy_checks.check_cluster(spec, provenance, say)
    data = deploy_checks.check_data(spec, say) if (spec.data or spec.mounts) else ()
    code = code_manifest(spec.job_dir)
    dependencies = installed(Path(layout.DEPS_DIR))
    _check_changed(spec, execution, own, target.client, data, dependencies, code, say)
    digest = image.rsplit("@", 1)[1] if "@sha256:" in image else None
    run = RunInfo.create(
        spec,
        provenance,
        reason=f"VDK Control Service execution {execution.execution_id}",
        image_digest=digest,
        name=run_name,
        dependencies=dependencies,
        data=data,
        code_files=tuple(sorted(code.items())),
        execution=execution.execution_id,
    )
    plan = plan_run(spec, target, JobImage(image, spec.base_python or sys.executable), run, say)
    assert target.client is not None
    created = target.client.apply(plan.manifests, say)
    say(f"started run {run_name} ({target.backend}, namespace {target.namespace}): created "
        + ", ".join(f"{m['kind']}/{m['metadata']['name']}" for m in created))  # fmt: skip
    return target.client, summarize(target.client.get_run(run_name, target.backend))


def _check_changed(
    spec: MLJobSpec,
    execution: Execution,
    own: OwnJob | None,
    client: KubeClient | None,
    data: tuple,
    dependencies: tuple[tuple[str, str], ...],
    code: dict[str, str],
    say: Say,
) -> None:
    """`if_changed`: skip a scheduled execution (or one started with it as an argument) when nothing changed since
    the job's last successful run."""
    from vdk.plugin.ml_training.ops import deploy_changes

    asked = "if_changed" in execution.arguments
    if not spec.if_changed or client is None or not (asked or (own is not None and own.scheduled)):
        return
    changes = deploy_changes.changes(client, spec, deploy_changes.current_state(spec, data, dependencies, None, code))
    if changes.unchanged_since_success:
        assert changes.last_success is not None
        raise _Skip(
            f"if_changed: neither the code, the requirements, the configuration, the base image nor a dataset "
            f"changed since the last successful run {changes.last_success.name}: no run is started (skipped)"
        )
    if changes.last_success is None:
        say("if_changed: the job has no successful run yet: starting one")
        return
    since = changes.since_success
    parts = (since.changed_parts or [u.split(":")[0] for u in since.unknown]) if since is not None else []
    say(f"if_changed: {', '.join(parts) or 'something'} changed since run {changes.last_success.name}: starting one")


def installed(directory: Path) -> tuple[tuple[str, str], ...]:
    """(name, version) of the distributions installed in `directory` (the image's dependency layer)."""
    from importlib import metadata

    if not directory.is_dir():
        return ()
    found = {(d.metadata["Name"], d.version) for d in metadata.distributions(path=[str(directory)])}
    return tuple(sorted(found, key=lambda item: item[0].lower()))


def _cancelled(own_client: KubeClient | None, execution: Execution) -> bool:
    """Whether the execution's Job is being deleted (or is gone): the Control Service cancelled it."""
    from vdk.plugin.ml_training.k8s.own_execution import read_own_job

    if own_client is None:
        return False
    try:
        own = read_own_job(own_client, execution.execution_id)
    except MLTrainingError:
        return False
    return own is None or own.deleting


def _failed(error: MLTrainingError, run: str | None, say: Say) -> LaunchOutcome:
    """A problem before or while following: said with its fix; the platform's (the cluster not reached, the
    launcher not allowed) or the user's (anything else: the job's configuration, its data, a run that failed)."""
    from vdk.plugin.ml_training.k8s.api_errors import KubeApiError

    say(f"error: {error.problem}")
    if error.fix:
        say(f"Fix: {error.fix}")
    refused = isinstance(error, KubeApiError) and (error.status in (0, 401, 403) or error.status >= 500)
    platform = refused or isinstance(error, LauncherSetupError)
    return LaunchOutcome(PLATFORM_ERROR if platform else USER_ERROR, run, error.problem)


def parse_arguments(text: str | None) -> dict[str, Any]:
    """The execution's `--arguments` JSON (the Control Service passes what `vdk execute --start` was given)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise MLTrainingError(
            f"the execution's --arguments are not JSON ({e})", 'give a JSON object: `--arguments \'{"nodes": "2"}\'`'
        ) from None
    if not isinstance(value, dict):
        raise MLTrainingError(
            f"the execution's --arguments are not a JSON object of [ml-training] keys: {text}",
            'give a JSON object: `--arguments \'{"nodes": "2", "args": "--lr 1e-3"}\'`',
        )
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
