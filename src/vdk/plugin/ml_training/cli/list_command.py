"""`vdk list` for ml-training jobs: the options, one function of the API each (`api.list_jobs`, `api.gpu_usage`
with `--usage`), and their result as text (cli/cluster_views.py, cli/usage_views.py) or JSON; notes on stderr
(cli/console.py). With the Control Service CLI installed it wraps its command (cli/cluster_scope.py says when an
invocation is for ML); `vdk list -o json` then prints one array of ML jobs and data jobs, each entry with `kind` =
"ml-training" or "data-job"; `vdk list -a` shows the jobs of every team.

Every vdk command imports the verbs (`vdk run` included, cli/commands.py): kubernetes and the k8s package are
imported when a verb runs.
"""

from __future__ import annotations

import json
from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_scope import list_is_ml
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import not_listed
from vdk.plugin.ml_training.cli.cluster_scope import output_option
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import scope
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.console import Console

KIND_DATA = "data-job"  # `kind` of the Control Service's data jobs in `vdk list -o json`


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
    from vdk.plugin.ml_training.cli import usage_views

    seconds = usage_views.since_seconds(since)
    used = api.gpu_usage(scope(None, team, None), all_teams=all_teams, since_seconds=seconds, reporter=Console())
    if as_json:
        print_json(used.to_dict())
        return
    click.echo(usage_views.usage_text(used.report, used.where, used.team.phrase() if used.team else None))


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
