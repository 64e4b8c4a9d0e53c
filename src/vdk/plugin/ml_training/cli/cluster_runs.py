"""`vdk list`, `vdk show`, `vdk delete` and `vdk execute` for ml-training jobs: which jobs run, why
a run waits or failed, the logs of every rank, re-running and cancelling runs.

This module is imported by every vdk command (`vdk run` included), so kubernetes and the k8s
package are imported inside the callbacks only.

With the Control Service CLI installed these wrap its commands:
- `list` shows the ML jobs of the kube context's namespace whenever a kube context is configured,
  then the Control Service's data jobs when its URL is set. `-o json` prints one array of both,
  each entry with `kind` = "ml-training" or "data-job".
- `show`, `delete` and `execute -n NAME` are for ML when runs labelled `vdk.io/job-name=NAME` exist
  in the cluster, or with -p, or when run in an ml-training job's directory; otherwise (and whenever the
  cluster is unconfigured or unreachable) the Control Service's command runs unchanged.
Without it, they always mean ML jobs.

Teams: every verb works on the runs of one (team, job) — `Scope` says where the team comes from,
`k8s.selection` how the runs are chosen; `vdk list -a` shows the jobs of every team.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import click

from vdk.plugin.ml_training.cli import verbs

if TYPE_CHECKING:
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.job.teams import TeamChoice
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.run_summary import RunSummary
    from vdk.plugin.ml_training.k8s.selection import JobSelection

log = logging.getLogger(__name__)

_SCOPE_KEY = "vdk_ml_training.scope"
# `vdk execute --<operation>` (the Control Service CLI's flags, one option named `operation`)
OPERATION_HELP = {
    "start": "Run a past run again exactly: same image digest and manifests (-i RUN, default the latest).",
    "cancel": "Stop the run -i RUN and delete it.",
    "list": "List the job's runs.",
    "show": "A run's ranks, why it waits or failed, its progress (-i RUN, default the latest).",
    "logs": "The logs of every rank (-i RUN, default the latest); ranks without a log say why.",
    "outputs": "The files a run wrote to its output claim (-i RUN, default the latest); --to DIR copies them.",
}
OPERATIONS = tuple(OPERATION_HELP)
SHOW_RUNS = 10  # runs in `vdk show`'s table (all with -o json and `vdk execute --list`)


# --- options (the Control Service CLI's names) ------------------------------------------------------


def _name_option() -> click.Option:
    return click.Option(["-n", "--name"], help="The job name.")


def _team_option() -> click.Option:
    return click.Option(
        ["-t", "--team"],
        help="The team whose runs to work on [with -p the job's [owner] team, else your default team "
        "(`vdk set-default`), else that of the job directory you are in]; `-t ''`: the runs without a team.",
    )


def _job_path_option() -> click.Option:
    return click.Option(
        ["-p", "--job-path"],
        type=click.Path(exists=True, file_okay=False, dir_okay=True, resolve_path=True),
        help="ml-training: the job directory; its name and [owner] team are the defaults of -n and -t.",
    )


def _output_option() -> click.Option:
    return click.Option(
        ["-o", "--output"],
        type=click.Choice(["text", "json"], case_sensitive=False),
        default="text",
        help="Format of the result: text or json.",
    )


# --- is this invocation for ML? ------------------------------------------------------------------------


def _wrapped() -> bool:
    """Whether the Control Service CLI's command is wrapped (else the plugin's own verb runs)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and getattr(ctx.command, "wrapped_command", None) is not None


def _kube_configured(job_path: str | None = None) -> bool:
    """A kube context may be reachable: a kubeconfig file, a configured context, or a pod's service
    account. Local checks only: data-job commands must not pay for a cluster they do not use."""
    from vdk.plugin.ml_training.cli.context import settings_from_click
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.k8s import kubeconfig

    try:
        context = settings_from_click(_job_dir(job_path)).get("kube_context")
    except MLTrainingError:  # a broken config.ini here: the verb reports it, if it is for ML
        context = None
    if context or kubeconfig.in_a_pod():
        return True
    return any(os.path.isfile(p) for p in kubeconfig.kubeconfig_paths())


def _not_listed(error: MLTrainingError) -> None:
    """Why `vdk list` shows no ML jobs while it goes on with the Control Service's data jobs."""
    click.echo(f"ml-training jobs are not listed: {error.message}", err=True)


def _list_is_ml(kwargs: dict[str, Any]) -> bool:
    if not _wrapped() or _kube_configured():
        return True
    if not kwargs.get("rest_api_url"):
        # The Control Service's list fails next for want of its URL; the user may have been looking
        # for ML runs, so say why there are none. (With a URL, data-job users are not bothered.)
        from vdk.plugin.ml_training.k8s.api_errors import no_cluster_configured
        from vdk.plugin.ml_training.k8s.kubeconfig import kubeconfig_paths

        _not_listed(no_cluster_configured(kubeconfig_paths()))
    return False


def _names_ml_job(kwargs: dict[str, Any]) -> bool:
    """show/delete/execute: ML with -p, in an ml-training job's directory, or when the cluster has runs of
    -n NAME. A cluster that is not configured, not reachable or not readable means "not ML": the data-job
    command runs."""
    if not _wrapped() or kwargs.get("job_path"):
        return True
    if not _kube_configured(kwargs.get("job_path")):
        return False
    from vdk.plugin.ml_training.errors import MLTrainingError

    name = kwargs.get("name")
    try:
        scope = _scope(name, kwargs.get("team"), None)
        if scope.job_dir is not None and not name:
            return True  # run in an ml-training job's directory
        return bool(scope.job_name) and scope.client.has_runs(scope.job_name)
    except MLTrainingError as e:
        log.debug("Not looking for ml-training runs of %s: %s", name, e.problem)
        return False


# --- shared ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a verb works on, from its options, VDK configuration and the directory it runs in.

    The team: -t, else the `[owner] team` of the job named with -p, else VDK's default team (`vdk
    set-default`), else the `[owner] team` of the ml-training job directory the command runs in. The job
    name: -n, else the name of that job directory. The namespace: the job's `namespace` key, else the
    team's entry of ml_training_team_namespaces, else ml_training_namespace, else the kube context's."""

    team: TeamChoice | None
    job_name: str | None
    job_dir: Path | None  # the job named with -p, or the one the command runs in
    context: str | None
    namespace: str | None

    @cached_property
    def client(self) -> KubeClient:
        from vdk.plugin.ml_training.k8s.client import KubeClient

        return KubeClient(self.context, self.namespace)


def _scope(name: str | None, team: str | None, job_path: str | None) -> Scope:
    """The invocation's Scope, computed once per command."""
    ctx = click.get_current_context()
    if _SCOPE_KEY not in ctx.meta:
        ctx.meta[_SCOPE_KEY] = _new_scope(name, team, job_path)
    return ctx.meta[_SCOPE_KEY]


def _job_dir(job_path: str | None) -> Path | None:
    """The job a verb works on: -p, else the ml-training job directory it runs in (None: neither)."""
    from vdk.plugin.ml_training.job import is_ml_job

    if job_path:
        return Path(job_path)
    return Path.cwd() if is_ml_job(Path.cwd()) else None


def _new_scope(name: str | None, team: str | None, job_path: str | None) -> Scope:
    from vdk.plugin.ml_training.cli.context import settings_from_click
    from vdk.plugin.ml_training.cli.context import team_option
    from vdk.plugin.ml_training.job import CONFIG_FILE
    from vdk.plugin.ml_training.job import is_ml_job
    from vdk.plugin.ml_training.job import load_job_spec
    from vdk.plugin.ml_training.job import owner_team
    from vdk.plugin.ml_training.job import teams

    option, default = team_option(team)
    job_dir = Path(job_path) if job_path else None
    here = Path.cwd() if job_dir is None and is_ml_job(Path.cwd()) else None
    # VDK settings: the environment, else [vdk] of the job's config.ini (with -p, or run in its directory)
    settings = settings_from_click(job_dir or here)
    choice = teams.choose_team(
        option,
        job=teams.OwnerTeam(owner_team(job_dir), job_dir / CONFIG_FILE) if job_dir else None,
        default=default,
        here=teams.OwnerTeam(owner_team(here), here / CONFIG_FILE) if here else None,
    )
    if choice is not None and choice.name:
        teams.team_label(choice.name)  # a team that cannot be a label value has no runs: say so, with the fix
    directory = job_dir or here
    if directory is not None:
        spec = load_job_spec(directory, settings, team=choice.name if choice else None)
        return Scope(choice, name or spec.kubernetes_name(), directory, spec.kube_context, spec.namespace)
    mapped = teams.mapping(settings, teams.TEAM_NAMESPACES).get(choice.name if choice else None)
    return Scope(choice, name, None, settings.get("kube_context"), mapped or settings.get("namespace"))


def _select(
    name: str | None, team: str | None, job_path: str | None, command: str, changes: bool = False
) -> JobSelection:
    """The runs of the (team, job) the options name (see k8s.selection). `command`: the verb and its
    operation (`execute --cancel -i RUN`), for the commands that errors suggest."""
    from vdk.plugin.ml_training.k8s.selection import select_job

    scope = _scope(name, team, job_path)
    verb, _, operation = command.partition(" ")
    name = _require_name(scope.job_name, verb)
    suggestion = f"vdk {verb}{' ' + operation if operation else ''} -n {name}"
    return select_job(scope.client, name, scope.team, suggestion, changes=changes)


def _team_args(selection: JobSelection) -> str:
    """The -t to repeat in a suggested command; none when the default team or the only team was meant."""
    from vdk.plugin.ml_training.job.teams import FROM_DEFAULT

    choice = selection.choice
    if (choice is not None and choice.source == FROM_DEFAULT) or (choice is None and selection.team.label is None):
        return ""
    return " " + selection.team.option()


def _ml_errors(run_ml: Callable[..., None]) -> Callable[..., None]:
    """MLTrainingError -> the problem and its fix on stderr, exit code 1."""

    def run(**kwargs: Any) -> None:
        from vdk.plugin.ml_training.cli.context import fail
        from vdk.plugin.ml_training.errors import MLTrainingError

        try:
            return run_ml(**kwargs)
        except MLTrainingError as e:
            fail(e)

    return run


def _json(data: Any) -> None:
    click.echo(json.dumps(_strict(data), indent=2, sort_keys=False, allow_nan=False))


def _strict(data: Any) -> Any:
    """`data` with NaN and infinities (a diverged loss) as null: strict JSON parsers reject them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _strict(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict(value) for value in data]
    return data


def _require_name(name: str | None, verb: str) -> str:
    if not name:
        raise click.UsageError(
            f"`vdk {verb}` of an ml-training job needs -n/--name: the job name (`vdk list` shows them), "
            "or -p/--job-path: the job directory"
        )
    return name


# --- vdk list ----------------------------------------------------------------------------------------


def list_ml(
    team: str | None, operation_all: Any, output: str | None, usage: bool = False, since: str | None = None
) -> None:
    from vdk.plugin.ml_training.errors import MLTrainingError

    ctx = click.get_current_context()
    original = getattr(ctx.command, "wrapped_command", None)
    data_jobs = original is not None and bool(ctx.params.get("rest_api_url"))
    as_json = (output or "text").lower() == "json"
    if usage or since is not None:
        return _usage(team, operation_all in ("all", True), since, as_json)
    try:
        # click makes an unset `flag_value="all"` flag the string "False": compare with the value.
        entries, text = _ml_jobs(team, operation_all in ("all", True))
    except MLTrainingError as e:
        if not data_jobs:
            raise
        _not_listed(e)
        entries, text = None, None
    if as_json:
        merged = list(entries or [])
        if data_jobs:
            from vdk.plugin.ml_training.cli.cluster_views import KIND_DATA

            merged += [{"kind": KIND_DATA, **job} for job in _data_jobs_json(ctx, original)]
        _json(merged)
        return
    if text is not None:
        click.echo(text)
    if data_jobs:
        click.echo("\nData jobs (Control Service):")
        ctx.invoke(original.callback, **_original_kwargs(ctx, original))


def _ml_jobs(team: str | None, all_teams: bool) -> tuple[list[dict], str]:
    """One entry per (team, job) — of the chosen team unless `all_teams` — and the text of `vdk list`: one
    list per backend, whatever the number of runs (their phases are honest from the operators' status)."""
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.selection import select_jobs
    from vdk.plugin.ml_training.k8s.selection import where

    scope = _scope(None, team, None)
    choice = None if all_teams else scope.team
    client = scope.client
    jobs = select_jobs(client, choice)
    entries = [cluster_views.job_entry(job.runs, job.runs[0].phase, job.team_name) for job in jobs]
    text = cluster_views.jobs_text(entries, where(client), choice.phrase() if choice else None)
    elsewhere = _teams_elsewhere(client.namespace)
    return entries, text + (f"\n{elsewhere}" if elsewhere else "")


def _usage(team: str | None, all_teams: bool, since: str | None, as_json: bool) -> None:
    """`vdk list --usage`: GPU-hours by team and job, and the wasted ones."""
    from vdk.plugin.ml_training.cli import cluster_usage
    from vdk.plugin.ml_training.k8s.selection import where

    seconds = cluster_usage.since_seconds(since)
    scope = _scope(None, team, None)
    choice = None if all_teams else scope.team
    report = cluster_usage.usage_report(scope.client, choice, seconds)
    if as_json:
        _json(cluster_usage.usage_json(report, scope.client, choice))
        return
    click.echo(cluster_usage.usage_text(report, where(scope.client), choice.phrase() if choice else None))


def _keep_usage(client: KubeClient, runs: list[RunSummary]) -> None:
    """Before runs are deleted: their GPU-hours stay in `vdk list --usage` (a warning when they cannot)."""
    from vdk.plugin.ml_training.cli import cluster_usage
    from vdk.plugin.ml_training.source import audit

    for problem in cluster_usage.keep_usage(client, runs, audit.deployer()):
        click.echo(f"warning: {problem}", err=True)


def _teams_elsewhere(namespace: str) -> str | None:
    """A note on the teams that ml_training_team_namespaces puts in other namespaces (`vdk list -t TEAM`)."""
    from vdk.plugin.ml_training.cli.context import settings_from_click
    from vdk.plugin.ml_training.job import teams

    mapped = teams.mapping(settings_from_click(_job_dir(None)), teams.TEAM_NAMESPACES)
    others = [f"{team} ({ns})" for team, ns in mapped.entries if ns != namespace]
    if not others:
        return None
    return f"Teams with a namespace of their own: {', '.join(others)}; `vdk list -t TEAM` lists a team's jobs."


def _original_kwargs(ctx: click.Context, original: click.Command) -> dict[str, Any]:
    return {p.name: ctx.params.get(p.name) for p in original.params if p.expose_value and p.name in ctx.params}


def _data_jobs_json(ctx: click.Context, original: click.Command) -> list[dict]:
    """The Control Service's `list -o json`, captured to merge it with the ML jobs."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        ctx.invoke(original.callback, **_original_kwargs(ctx, original))
    text = buffer.getvalue().strip()
    return json.loads(text) if text else []


LIST = verbs.Verb(
    name="list",
    help=(
        "List ml-training jobs: each job's latest run, backend, phase, age and nodes x GPUs; "
        "--usage: GPU-hours by team and job, and the wasted ones."
    ),
    ml_help=(
        "ml-training jobs of the kube context's namespace are listed first (latest run, backend, phase, age, "
        "nodes x GPUs). With -o json, ML jobs and data jobs form one array; `kind` tells them apart. "
        "--usage [--since 30d]: GPU-hours of ml-training runs by team and job, and the wasted ones."
    ),
    params=[
        _team_option(),
        click.Option(
            ["-a", "--all", "operation_all"], is_flag=True, flag_value="all", default=False, help="Jobs of all teams."
        ),
        _output_option(),
        click.Option(
            ["--usage"],
            is_flag=True,
            default=False,
            help="ml-training: allocated GPU-hours by team and job, and the wasted ones (runs that failed, stalled "
            "or were cancelled; time after a run's last optimizer step).",
        ),
        click.Option(
            ["--since"],
            help="ml-training, with --usage: only the GPU-hours of this last period, e.g. 30d, 12h, 1w "
            "[since the oldest run still in the cluster].",
        ),
    ],
    ml_only=("usage", "since"),
    is_ml=_list_is_ml,
    run_ml=_ml_errors(list_ml),
)


# --- vdk show ----------------------------------------------------------------------------------------


def show_ml(name: str | None, team: str | None, job_path: str | None, output: str | None) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.observe import inspect_run
    from vdk.plugin.ml_training.k8s.selection import where

    selection = _select(name, team, job_path, "show")
    client, name, runs = selection.client, selection.job_name, selection.runs
    detail = inspect_run(client, runs[0])
    phases = {detail.run.name: detail.phase}
    if (output or "text").lower() == "json":
        _json(
            {
                "kind": cluster_views.KIND_ML,
                "job_name": name,
                "job_team": selection.team_name,
                "namespace": client.namespace,
                "context": client.context,
                "runs": [r.to_dict() for r in runs],
                "latest": detail.to_dict(),
            }
        )
        return
    again = f"-n {name}{_team_args(selection)}"
    click.echo(f"{selection.heading()}: {len(runs)} run(s) in {where(client)}\n")
    click.echo(cluster_views.runs_text(runs[:SHOW_RUNS], phases))
    if len(runs) > SHOW_RUNS:
        click.echo(f"... and {len(runs) - SHOW_RUNS} older: vdk execute --list {again}")
    click.echo("\n" + cluster_views.detail_text(detail, title="Latest run"))
    click.echo(f"\nLogs of every rank: vdk execute --logs {again}")
    for other in selection.others:
        click.echo(f"note: {name} also has {other.describe()}: vdk show -n {name} {other.option()}")


SHOW = verbs.Verb(
    name="show",
    help=(
        "Show an ml-training job: its recent runs; for the latest, every rank's state, why it waits or failed, "
        "progress."
    ),
    ml_help=(
        "ml-training jobs: the job's runs, and for the latest its ranks, why it waits (scheduling, image pulls, "
        "Kueue) or failed (OOMKilled, exit codes, the failing rank's last log lines), its audit trail and progress."
    ),
    params=[_name_option(), _team_option(), _job_path_option(), _output_option()],
    ml_only=("job_path",),
    is_ml=_names_ml_job,
    run_ml=_ml_errors(show_ml),
)


# --- vdk delete --------------------------------------------------------------------------------------


def delete_ml(name: str | None, team: str | None, job_path: str | None, yes: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.selection import where

    selection = _select(name, team, job_path, "delete", changes=True)
    client, runs = selection.client, selection.runs
    what = f"{len(runs)} run(s) of {selection.describe()}"
    click.echo(f"Runs of {selection.heading()} in {where(client)}:", err=True)
    click.echo(cluster_views.runs_text(runs), err=True)
    if yes:
        click.echo(f"Deleting {what} (--yes)", err=True)
    else:
        click.confirm(f"Delete these {what}, their pods (running ones stop) and run records?", abort=True, err=True)
    _keep_usage(client, runs)
    for run in runs:
        client.delete_run(run.name, run.backend)
        click.echo(f"Deleted {run.name}")
    for other in selection.others:
        kept = other.describe() if other.label is None else f"runs of {other.describe()}"
        click.echo(f"Kept: {selection.job_name}'s {kept}", err=True)


DELETE = verbs.Verb(
    name="delete",
    help="Delete an ml-training job: all its runs (running ones are stopped) and their records.",
    ml_help=(
        "ml-training jobs: deletes every run of the job of one team from the cluster (asks first unless --yes); "
        "another team's runs only when that team is named with -t."
    ),
    params=[
        _name_option(),
        _team_option(),
        _job_path_option(),
        click.Option(["--yes"], is_flag=True, help="Do not ask for confirmation."),
    ],
    ml_only=("job_path",),
    is_ml=_names_ml_job,
    run_ml=_ml_errors(delete_ml),
)


# --- vdk execute -------------------------------------------------------------------------------------


def execute_ml(
    name: str | None,
    team: str | None,
    job_path: str | None,
    execution_id: str | None,
    operation: str | None,
    output: str | None,
    follow: bool,
    reason: str | None,
    to: str | None = None,
) -> None:
    if operation not in OPERATIONS:
        raise click.UsageError("choose what to do: --start, --cancel, --list, --show, --logs or --outputs")
    if follow and operation != "logs":
        raise click.UsageError("--follow goes with --logs")
    if to is not None and operation != "outputs":
        raise click.UsageError("--to goes with --outputs")
    as_json = (output or "text").lower() == "json"
    if follow and as_json:
        raise click.UsageError("--follow prints log lines as they come; it has no JSON form")
    if operation == "cancel" and not execution_id:
        raise click.UsageError("--cancel needs -i/--execution-id: the run to cancel (`vdk execute --list -n JOB`)")
    command = f"execute --{operation}" + (f" -i {execution_id}" if execution_id else "")
    selection = _select(name, team, job_path, command, changes=operation == "cancel")
    if operation == "list":
        _execute_list(selection, as_json)
    elif operation == "show":
        _execute_show(selection, execution_id, command, as_json)
    elif operation == "logs":
        _execute_logs(selection, execution_id, command, as_json, follow)
    elif operation == "outputs":
        _execute_outputs(selection, execution_id, command, as_json, to)
    elif operation == "start":
        _execute_start(selection, execution_id, command, reason, as_json)
    else:
        _execute_cancel(selection, execution_id, command, as_json)


def _execute_list(selection: JobSelection, as_json: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views

    if as_json:
        _json([r.to_dict() for r in selection.runs])
    else:
        click.echo(cluster_views.runs_text(selection.runs))


def _execute_show(selection: JobSelection, execution_id: str | None, command: str, as_json: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.observe import inspect_run

    detail = inspect_run(selection.client, selection.pick(execution_id, f"vdk {command} -n {selection.job_name}"))
    if as_json:
        _json(detail.to_dict())
    else:
        click.echo(cluster_views.detail_text(detail))


def _execute_logs(selection: JobSelection, execution_id: str | None, command: str, as_json: bool, follow: bool) -> None:
    from vdk.plugin.ml_training.k8s import observe

    client = selection.client
    run = selection.pick(execution_id, f"vdk {command} -n {selection.job_name}")
    if follow:
        return _follow(client, run)
    logs = list(observe.rank_logs(client, run))
    if as_json:
        _json({"run": run.name, "phase": run.phase, "ranks": [entry.to_dict() for entry in logs]})
        return
    if not logs:
        _explain_no_pods(client, run)
    for entry in logs:
        rank = entry.rank.rank
        if entry.previous:
            _echo_prefixed(f"[rank {rank}, previous container] ", entry.previous)
        if entry.current is not None:
            _echo_prefixed(f"[rank {rank}] ", entry.current)
        else:
            click.echo(f"[rank {rank}] no log: {entry.unavailable}", err=True)


def _execute_outputs(
    selection: JobSelection, execution_id: str | None, command: str, as_json: bool, to: str | None
) -> None:
    """List the files the run wrote to its output claim, or copy them into `to`, through a copy pod."""
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.k8s import output_location
    from vdk.plugin.ml_training.k8s import outputs_copy

    client = selection.client
    run = selection.pick(execution_id, f"vdk {command} -n {selection.job_name}")
    rec = client.read_run_record(run.name)
    location = output_location.location_of({"manifests": rec.manifests})
    if location is None:
        raise MLTrainingError(
            f"run {run.name} has no output claim: what it wrote went with its pods",
            "set `output_pvc = NAME` in [ml-training] (or VDK_ML_TRAINING_OUTPUT_PVC) to an existing "
            "PersistentVolumeClaim and deploy again; its runs keep their files there",
        )
    into = Path(to).expanduser().resolve() if to is not None else None
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
    pod = outputs_copy.copy_pod(
        run.name,
        selection.job_name,
        rec.image,
        output_location.image_python(rec.manifests),
        location,
        client.namespace,
        copy=into is not None,
    )
    click.echo(f"Reading {run.name}'s outputs ({location.describe()}) through pod {pod['metadata']['name']}", err=True)
    progress = cluster_views.CopyProgress(lambda text: click.echo(text, err=True))
    reader = outputs_copy.read_outputs(
        client,
        pod,
        into,
        progress.update if into is not None else None,
        lambda why: click.echo(f"  waiting for the copy pod: {why}", err=True),
    )
    if as_json:
        _json(
            {
                "run": run.name,
                "location": location.to_dict(),
                "files": [f.to_dict() for f in reader.files],
                "bytes": sum(f.size for f in reader.files),
                "copied_to": str(into) if into is not None else None,
            }
        )
        return
    if into is None:
        click.echo(cluster_views.output_files_text(reader.files))
        if reader.files:
            click.echo(f"Copy them: vdk execute --outputs -n {selection.job_name} -i {run.name} --to DIR", err=True)
        return
    total = sum(f.size for f in reader.files)
    click.echo(f"Copied {len(reader.written)} file(s), {cluster_views.format_size(total)}, to {into}")


def _echo_prefixed(prefix: str, text: str) -> None:
    click.echo("".join(f"{prefix}{line}\n" for line in text.splitlines()), nl=False)


def _explain_no_pods(client: KubeClient, run: RunSummary) -> None:
    from vdk.plugin.ml_training.k8s.observe import why_no_pods

    click.echo(f"{run.name} has no pods, so no logs: {why_no_pods(client, run)}", err=True)


def _follow(client: KubeClient, run: RunSummary) -> None:
    from vdk.plugin.ml_training.k8s.observe import follow_logs

    click.echo(f"Following {run.name} (Ctrl-C stops following; the run goes on)", err=True)
    seen = []

    def write(rank: str, line: str) -> None:
        seen.append(rank)
        click.echo(f"[rank {rank}] {line}")

    def explain(rank: str, why: str) -> None:
        click.echo(f"[{rank if rank == 'run' else 'rank ' + rank}] {why}", err=True)

    try:
        final = follow_logs(client, run, write, explain)
    except KeyboardInterrupt:
        return
    if not seen and not final.finished:
        return
    click.echo(f"{final.name} {final.phase}" + (f": {final.message}" if final.message else ""), err=True)


def _execute_start(
    selection: JobSelection, execution_id: str | None, command: str, reason: str | None, as_json: bool
) -> None:
    """Run a past run again exactly: its record's image digest and manifests, a new run name."""
    from datetime import datetime
    from datetime import timezone

    from vdk.plugin.ml_training.k8s import run_record
    from vdk.plugin.ml_training.k8s.run_identity import new_run_name
    from vdk.plugin.ml_training.source import audit

    client, name = selection.client, selection.job_name
    source = selection.pick(execution_id, f"vdk {command} -n {name}")
    rec = client.read_run_record(source.name)
    run_name = new_run_name(name)
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    manifests = run_record.rerun_manifests(rec, run_name, audit.deployer(), now, reason)
    created = client.apply(manifests)
    result = {
        "job_name": name,
        "job_team": selection.team_name,
        "run": run_name,
        "rerun_of": source.name,
        "backend": rec.backend,
        "image": rec.image,
        "namespace": client.namespace,
        "created": [f"{m['kind']}/{m['metadata']['name']}" for m in created],
    }
    if as_json:
        _json(result)
        return
    again = f"-n {name}{_team_args(selection)}"
    click.echo(
        f"Started run {run_name} of {selection.describe()}: a re-run of {source.name} "
        f"({rec.backend}, namespace {client.namespace})"
    )
    click.echo(f"  image   {rec.image}")
    click.echo(f"Follow it:  vdk show {again}      logs of every rank:  vdk execute --logs {again} --follow")


def _execute_cancel(selection: JobSelection, execution_id: str | None, command: str, as_json: bool) -> None:
    run = selection.pick(execution_id, f"vdk {command} -n {selection.job_name}")
    _keep_usage(selection.client, [run])
    deleted = selection.client.delete_run(run.name, run.backend)
    if as_json:
        _json(
            {
                "job_name": selection.job_name,
                "job_team": selection.team_name,
                "run": run.name,
                "phase": run.phase,
                "deleted": deleted,
            }
        )
        return
    click.echo(
        f"Cancelled {run.name} of {selection.describe()} (was {run.phase}): deleted {', '.join(deleted)}; "
        "its pods stop now"
    )


EXECUTE = verbs.Verb(
    name="execute",
    help=(
        "Runs of an ml-training job: --list, --show, --logs (every rank), --outputs (list or copy back), "
        "--start (re-run exactly), --cancel."
    ),
    ml_help=(
        "ml-training jobs: --list its runs; --show [-i RUN] a run's ranks, why it waits or failed; --logs [-i RUN] "
        "[--follow] the logs of every rank (pending ranks say why); --outputs [-i RUN] [--to DIR] lists (copies) "
        "the files it wrote to its output claim; --start [-i RUN] runs a past run again exactly "
        "(same image digest and manifests; default the latest); --cancel -i RUN stops and deletes a run. "
        "RUN is the run name or its last part."
    ),
    params=[
        _name_option(),
        _team_option(),
        _job_path_option(),
        click.Option(
            ["-i", "--execution-id"], help="The run (its name, or the part after the job name); default the latest."
        ),
        *[click.Option([f"--{op}", "operation"], flag_value=op, help=text) for op, text in OPERATION_HELP.items()],
        _output_option(),
        click.Option(
            ["--follow", "-f"],
            is_flag=True,
            help="ml-training, with --logs: keep printing new log lines until the run ends.",
        ),
        click.Option(["--reason", "-r"], help="ml-training, with --start: why this run (kept in its audit trail)."),
        click.Option(
            ["--to"],
            type=click.Path(file_okay=False, dir_okay=True),
            help="ml-training, with --outputs: the directory to copy the run's outputs into.",
        ),
    ],
    ml_only=("job_path", "follow", "reason", "to"),
    is_ml=_names_ml_job,
    run_ml=_ml_errors(execute_ml),
)

VERBS: list[verbs.Verb] = [LIST, SHOW, DELETE, EXECUTE]
