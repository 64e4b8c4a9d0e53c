"""`vdk list`, `vdk show` and `vdk delete` for ml-training jobs (`vdk execute`: cli/cluster_execute.py): the
options, one function of the API each (`api.list_jobs`, `api.gpu_usage`, `api.show_job`, `api.delete_runs`), and
their result as text (cli/cluster_views.py) or JSON; notes on stderr (cli/console.py). With the Control Service
CLI installed these wrap its commands (cli/cluster_scope.py says when an invocation is for ML); `vdk list -o json`
then prints one array of ML jobs and data jobs, each entry with `kind` = "ml-training" or "data-job".

Teams: every verb works on the runs of one (team, job) — ops/scope.py says where the team comes from,
`k8s.selection` how the runs are chosen; `vdk list -a` shows the jobs of every team.

Every vdk command imports this module (`vdk run` included): kubernetes and the k8s package are imported when
a verb runs.
"""

from __future__ import annotations

import json
from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_execute import EXECUTE
from vdk.plugin.ml_training.cli.cluster_scope import execution_id_option
from vdk.plugin.ml_training.cli.cluster_scope import job_path_option
from vdk.plugin.ml_training.cli.cluster_scope import list_is_ml
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import name_option
from vdk.plugin.ml_training.cli.cluster_scope import names_ml_job
from vdk.plugin.ml_training.cli.cluster_scope import not_listed
from vdk.plugin.ml_training.cli.cluster_scope import output_option
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import scope
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.cluster_scope import team_args
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.cluster_scope import verb_scope
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.vocabulary.human_units import counted

KIND_DATA = "data-job"  # `kind` of the Control Service's data jobs in `vdk list -o json`
SHOW_RUNS = 10  # runs in `vdk show`'s table (all with -o json and `vdk execute --list`)


# --- vdk list ----------------------------------------------------------------------------------------


def list_ml(
    team: str | None, operation_all: Any, output: str | None, usage: bool = False, since: str | None = None
) -> None:
    from vdk.plugin.ml_training.errors import MLTrainingError

    ctx = click.get_current_context()
    original = getattr(ctx.command, "wrapped_command", None)
    data_jobs = original is not None and bool(ctx.params.get("rest_api_url"))
    as_json = (output or "text").lower() == "json"
    # click makes an unset `flag_value="all"` flag the string "False": compare with the value.
    all_teams = operation_all in ("all", True)
    if usage or since is not None:
        return _usage(team, all_teams, since, as_json)
    try:
        entries, text = _ml_jobs(team, all_teams)
    except MLTrainingError as e:
        if not data_jobs:
            raise
        not_listed(e)
        entries, text = None, None
    if as_json:
        merged = list(entries or [])
        if data_jobs:
            merged += [{"kind": KIND_DATA, **job} for job in _data_jobs_json(ctx, original)]
        print_json(merged)
        return
    if text is not None:
        click.echo(text)
    if data_jobs:
        click.echo("\nData jobs (Control Service):")
        _invoke_original(ctx, original)


def _ml_jobs(team: str | None, all_teams: bool) -> tuple[list[dict], str]:
    """The JSON entries and the text of `vdk list`: one entry per (team, job)."""
    from vdk.plugin.ml_training.cli import cluster_views

    listing = api.list_jobs(scope(None, team, None), all_teams=all_teams, reporter=Console())
    entries = listing.to_dict()
    text = cluster_views.jobs_text(entries, listing.where, listing.team)
    if listing.teams_elsewhere:
        others = ", ".join(f"{name} ({ns})" for name, ns in listing.teams_elsewhere)
        text += f"\nTeams with a namespace of their own: {others}; `vdk list -t TEAM` lists a team's jobs."
    for note in listing.notes:  # what could not be listed: on stderr, so that JSON stays one document
        stderr(f"note: {note}")
    return entries, text


def _usage(team: str | None, all_teams: bool, since: str | None, as_json: bool) -> None:
    """`vdk list --usage`: GPU-hours by team and job, and the wasted ones."""
    from vdk.plugin.ml_training.cli import cluster_usage

    seconds = cluster_usage.since_seconds(since)
    used = api.gpu_usage(scope(None, team, None), all_teams=all_teams, since_seconds=seconds, reporter=Console())
    if as_json:
        print_json(used.to_dict())
        return
    click.echo(cluster_usage.usage_text(used.report, used.where, used.team.phrase() if used.team else None))


def _original_kwargs(ctx: click.Context, original: click.Command) -> dict[str, Any]:
    return {p.name: ctx.params.get(p.name) for p in original.params if p.expose_value and p.name in ctx.params}


def _invoke_original(ctx: click.Context, original: click.Command | None) -> None:
    """The Control Service's own `vdk list`, the command the verb wraps (asked for only when there is one)."""
    assert original is not None and original.callback is not None
    ctx.invoke(original.callback, **_original_kwargs(ctx, original))


def _data_jobs_json(ctx: click.Context, original: click.Command | None) -> list[dict]:
    """The Control Service's `list -o json`, captured to merge it with the ML jobs."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _invoke_original(ctx, original)
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
        team_option(),
        click.Option(
            ["-a", "--all", "operation_all"], is_flag=True, flag_value="all", default=False, help="Jobs of all teams."
        ),
        output_option(),
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
    is_ml=list_is_ml,
    run_ml=ml_errors(list_ml),
)


# --- vdk show ----------------------------------------------------------------------------------------


def show_ml(
    name: str | None,
    team: str | None,
    job_path: str | None,
    output: str | None,
    execution_id: str | None = None,
    provenance: bool = False,
    public_key: str | None = None,
    board: bool = False,
    dashboard: bool = False,
    last: int | None = None,
    to: str | None = None,
) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.runs.selection import where

    if board or dashboard or last is not None or to is not None:
        from vdk.plugin.ml_training.cli.viewer_views import show_viewer

        show_viewer(verb_scope(name, team, job_path, "show"), execution_id, board, dashboard, last, to, output)
        return

    if provenance or public_key:
        from vdk.plugin.ml_training.cli.provenance_views import show_provenance

        show_provenance(verb_scope(name, team, job_path, "show"), execution_id, public_key, output)
        return
    job = api.show_job(verb_scope(name, team, job_path, "show"), execution_id, reporter=Console())
    if (output or "text").lower() == "json":
        print_json(job.to_dict())
        return
    selection, detail, runs = job.selection, job.latest, job.runs
    name = selection.job_name
    again = f"-n {name}{team_args(selection)}"
    click.echo(f"{selection.heading()}: {counted(len(runs), 'run')} in {where(selection.client)}\n")
    click.echo(cluster_views.runs_text(runs[:SHOW_RUNS], {detail.run.name: detail.phase}))
    if len(runs) > SHOW_RUNS:
        click.echo(f"... and {len(runs) - SHOW_RUNS} older: vdk execute --list {again}")
    title = "Latest run" if detail.run.name == runs[0].name else "Run"
    click.echo("\n" + cluster_views.detail_text(detail, title=title))
    if job.sweep is not None:
        from vdk.plugin.ml_training.cli.sweep_views import sweep_text

        click.echo("\n" + sweep_text(job.sweep, again))
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
        "Kueue) or failed (OOMKilled, exit codes, the failing rank's last log lines), its audit trail and progress; "
        "-i RUN shows that run instead of the latest (as `vdk execute --show -i RUN` does); --provenance: what "
        "its image says of itself (SBOM, signed build provenance), checked against the run record."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        output_option(),
        execution_id_option("show"),
        click.Option(
            ["--provenance"],
            is_flag=True,
            help="ml-training jobs: the SBOM and build provenance attached to the run's image, read from its "
            "registry, its signature verified (with --public-key) and checked against the run record; exit 1 on "
            "any finding.",
        ),
        click.Option(
            ["--public-key"],
            metavar="PATH",
            help="ml-training jobs, with --provenance: the public key (cosign.pub) to verify the signature with.",
        ),
        click.Option(
            ["--board"],
            is_flag=True,
            help="ml-training jobs: TensorBoard over the chosen runs' loss, metrics, steps/s, learning rate and GPU "
            "use (-i RUN, else the last ones; of this machine's full runs and the cluster's), on a loopback port "
            "until Ctrl-C; the event files are copied to --to DIR (default: vdk's cache).",
        ),
        click.Option(
            ["--dashboard"],
            is_flag=True,
            help="ml-training jobs with a sweep: Optuna's dashboard over a copy of the sweep's study (-i SWEEP, else "
            "the newest), on a loopback port until Ctrl-C.",
        ),
        click.Option(
            ["--last"],
            type=click.IntRange(min=1),
            metavar="N",
            help="ml-training jobs, with --board: the N newest runs [5].",
        ),
        click.Option(
            ["--to"],
            metavar="DIR",
            help="ml-training jobs, with --board: where to copy the event files [vdk's cache].",
        ),
    ],
    ml_only=("job_path", "execution_id", "provenance", "public_key", "board", "dashboard", "last", "to"),
    is_ml=names_ml_job,
    run_ml=ml_errors(show_ml),
)


# --- vdk delete --------------------------------------------------------------------------------------


def delete_ml(name: str | None, team: str | None, job_path: str | None, yes: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.runs.selection import where

    def confirm(selection: api.JobSelection) -> bool:
        one = len(selection.runs) == 1
        what = f"{counted(len(selection.runs), 'run')} of {selection.describe()}"
        stderr(f"Runs of {selection.heading()} in {where(selection.client)}:")
        stderr(cluster_views.runs_text(selection.runs))
        if yes:
            stderr(f"Deleting {what} (--yes)")
        else:
            these, records = (
                ("this", "its pods (running ones stop) and run record")
                if one
                else ("these", "their pods (running ones stop) and run records")
            )
            click.confirm(f"Delete {these} {what}, {records}?", abort=True, err=True)
        return True

    done = api.delete_runs(verb_scope(name, team, job_path, "delete"), confirm=confirm, reporter=Console())
    selection = done.selection
    for other in selection.others:
        kept = other.describe() if other.label is None else f"runs of {other.describe()}"
        stderr(f"Kept: {selection.job_name}'s {kept}")


DELETE = verbs.Verb(
    name="delete",
    help="Delete an ml-training job: all its runs (running ones are stopped) and their records.",
    ml_help=(
        "ml-training jobs: deletes every run of the job of one team from the cluster (asks first unless --yes); "
        "another team's runs only when that team is named with -t."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        click.Option(["--yes"], is_flag=True, help="Do not ask for confirmation."),
    ],
    ml_only=("job_path",),
    is_ml=names_ml_job,
    run_ml=ml_errors(delete_ml),
)

VERBS: list[verbs.Verb] = [LIST, SHOW, DELETE, EXECUTE]
