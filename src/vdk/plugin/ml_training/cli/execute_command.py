"""`vdk execute` for ml-training jobs: the runs of a job — `--list`, `--show` (a run's ranks and why it waits
or failed), `--logs` (every rank's, once or `--follow`ed), `--outputs` (list or copy back what it wrote),
`--start` (run a past run again exactly) and `--cancel`. The options, one function of the API per operation
(`api.list_runs`, `api.show_run`, `api.follow_run`, `api.run_logs`, `api.follow_logs`, `api.run_outputs`,
`api.rerun`, `api.cancel_run`), and the result as text (cli/cluster_views.py) or JSON; notes on stderr
(cli/console.py).

Every vdk command imports this module: kubernetes and the k8s package are imported when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_scope import job_path_option
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import name_option
from vdk.plugin.ml_training.cli.cluster_scope import names_ml_job
from vdk.plugin.ml_training.cli.cluster_scope import output_option
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import say_started
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.cluster_scope import verb_scope
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Scope

# `vdk execute --<operation>` (the Control Service CLI's flags, one option named `operation`)
OPERATION_HELP = {
    "start": "Run a past run again exactly: same image digest and manifests (-i RUN, default the latest).",
    "cancel": "Stop a run and delete it (-i RUN, default the latest, if it has not ended).",
    "list": "List the job's runs.",
    "show": "A run's ranks, why it waits or failed, its progress (-i RUN, default the latest).",
    "logs": "The logs of every rank (-i RUN, default the latest); ranks without a log say why.",
    "outputs": "The files a run wrote to its output claim (-i RUN, default the latest); --to DIR copies them.",
}
OPERATIONS = tuple(OPERATION_HELP)


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
    trial: str | None = None,
    nodes: int | None = None,
    force: bool = False,
    from_run: str | None = None,
) -> None:
    if operation not in OPERATIONS:
        raise click.UsageError("choose what to do: --start, --cancel, --list, --show, --logs or --outputs")
    if follow and operation not in ("logs", "show"):
        raise click.UsageError("--follow goes with --logs (every rank's logs) or --show (the run, to its end)")
    if to is not None and operation != "outputs":
        raise click.UsageError("--to goes with --outputs")
    if trial is not None and operation not in ("logs", "start"):
        raise click.UsageError("--trial goes with --logs (a trial's log) or --start (a trial as a full run)")
    if nodes is not None and trial is None:
        raise click.UsageError("--nodes goes with --start --trial: the nodes of a sweep's trial run in full")
    if force and (trial is None or operation != "start"):
        raise click.UsageError("--force goes with --start --trial: a trial that did not complete, started all the same")
    if from_run is not None and (operation != "start" or trial is not None):
        raise click.UsageError("--from goes with --start: a new run that continues RUN, beginning with its outputs")
    as_json = (output or "text").lower() == "json"
    if follow and as_json:
        raise click.UsageError("--follow prints lines as they come; it has no JSON form")
    scope = verb_scope(name, team, job_path, "execute")
    if trial is not None:
        from vdk.plugin.ml_training.cli import sweep_execute

        sweep_execute.run(scope, operation, trial, execution_id, nodes, reason, as_json, follow, force)
        return
    if operation == "list":
        _list(scope, as_json)
    elif operation == "show" and follow:
        _follow_run(scope, execution_id)
    elif operation == "show":
        _show(scope, execution_id, as_json)
    elif operation == "logs" and follow:
        _follow(scope, execution_id)
    elif operation == "logs":
        _logs(scope, execution_id, as_json)
    elif operation == "outputs":
        _outputs(scope, execution_id, as_json, to)
    elif operation == "start":
        _start(scope, execution_id, reason, as_json, from_run)
    else:
        _cancel(scope, execution_id, as_json)


def _list(scope: Scope, as_json: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views

    runs = api.list_runs(scope, reporter=Console())
    if as_json:
        print_json([r.to_dict() for r in runs])
    else:
        click.echo(cluster_views.runs_text(runs))


def _show(scope: Scope, execution_id: str | None, as_json: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views

    detail = api.show_run(scope, execution_id, reporter=Console())
    if as_json:
        print_json(detail.to_dict())
    else:
        click.echo(cluster_views.detail_text(detail))


def _logs(scope: Scope, execution_id: str | None, as_json: bool) -> None:
    logs = api.run_logs(scope, execution_id, reporter=Console())
    if as_json:
        print_json(logs.to_dict())
        unread = logs.unread()
        if unread is not None:  # exits non-zero: nothing was read
            raise unread
        return
    for entry in logs.ranks:
        rank = entry.rank.rank
        if entry.previous:
            _echo_prefixed(f"[rank {rank}, previous container] ", entry.previous)
        if entry.current is not None:
            _echo_prefixed(f"[rank {rank}] ", entry.current)
        else:
            stderr(f"[rank {rank}] no log: {entry.unavailable}")
    for note in logs.notes:
        stderr(f"note: {note}")
    unread = logs.unread()
    if unread is not None:  # exits non-zero: nothing was read (a run without pods says why only there)
        raise unread


def _echo_prefixed(prefix: str, text: str) -> None:
    click.echo("".join(f"{prefix}{line}\n" for line in text.splitlines()), nl=False)


def _follow(scope: Scope, execution_id: str | None) -> None:
    console = Console()  # every rank's lines on stdout as `[rank R] ...`
    try:
        final = api.follow_logs(scope, execution_id, reporter=console)
    except KeyboardInterrupt as e:  # as `tail -f`: the status says it was stopped, so a script does not go on
        from vdk.plugin.ml_training.cli import interrupts

        stopped_by = interrupts.as_interrupted(e).name
        interrupts.exit_interrupted(
            e, f"\nStopped following the logs ({stopped_by}); the run goes on, nothing was cancelled."
        )
    if not console.lines and not final.finished:
        return
    stderr(f"{final.name} {final.phase}" + (f": {final.message}" if final.message else ""))


def _follow_run(scope: Scope, execution_id: str | None) -> None:
    """--show --follow: the run to its end (rank 0's output, failing ranks' last lines); exit status its outcome."""
    from vdk.plugin.ml_training.cli.cluster_follow import follow_and_exit

    follow_and_exit(lambda console: api.follow_run(scope, execution_id, reporter=console))


def _outputs(scope: Scope, execution_id: str | None, as_json: bool, to: str | None) -> None:
    """List the files the run wrote to its output claim, or copy them into `to`, through a copy pod."""
    from vdk.plugin.ml_training.cli import cluster_views

    outputs = api.run_outputs(scope, execution_id, to=to, reporter=Console())
    if as_json:
        print_json(outputs.to_dict())
        return
    if outputs.copied_to is None:
        click.echo(cluster_views.output_files_text(outputs.files))
        if outputs.files:
            stderr(f"Copy them: vdk execute --outputs -n {scope.job_name} -i {outputs.run.name} --to DIR")
        return
    written = outputs.written or []
    click.echo(f"Copied {counted(len(written), 'file')}, {size_text(outputs.size)}, to {outputs.copied_to}")


def _start(scope: Scope, execution_id: str | None, reason: str | None, as_json: bool, from_run: str | None) -> None:
    """Run a past run again exactly: its record's image digest and manifests, a new run name."""
    started = api.rerun(scope, execution_id, reason=reason, from_run=from_run, reporter=Console())
    if as_json:
        print_json(started.to_dict())
        return
    selection = started.selection
    what = f"a re-run of {started.source.name} ({started.record.backend}, namespace {selection.client.namespace})"
    if started.continues:
        what += f", continuing {started.continues} from its outputs and checkpoints"
    say_started(selection, started.run_name, what, started.record.image)


def _cancel(scope: Scope, execution_id: str | None, as_json: bool) -> None:
    cancelled = api.cancel_run(scope, execution_id, reporter=Console())
    if as_json:
        print_json(cancelled.to_dict())
        return
    click.echo(
        f"Cancelled {cancelled.run.name} of {cancelled.selection.describe()} (was {cancelled.run.phase}): "
        f"deleted {', '.join(cancelled.deleted)}; its pods stop now"
    )


EXECUTE = verbs.Verb(
    name="execute",
    help=(
        "Runs of an ml-training job: --list, --show, --logs (every rank), --outputs (list or copy back), "
        "--start (re-run exactly), --cancel."
    ),
    ml_help=(
        "ml-training jobs: --list its runs; --show [-i RUN] a run's ranks, why it waits or failed (with --follow: "
        "the run to its end); --logs [-i RUN] [--follow] the logs of every rank (pending ranks say why); --outputs "
        "[-i RUN] [--to DIR] lists (copies) the files it wrote to its output claim; --start [-i RUN] runs a past run "
        "again exactly "
        "(same image digest and manifests; default the latest), with --from RUN continuing RUN; --cancel [-i RUN] "
        "stops and deletes a run (default the latest, if it has not ended). "
        "RUN is the run name or its last part."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        click.Option(
            ["-i", "--execution-id"], help="The run (its name, or the part after the job name); default the latest."
        ),
        *[click.Option([f"--{op}", "operation"], flag_value=op, help=text) for op, text in OPERATION_HELP.items()],
        output_option(),
        click.Option(
            ["--follow", "-f"],
            is_flag=True,
            help="ml-training, with --logs: keep printing new log lines until the run ends; with --show: follow the "
            "run to its end (rank 0's output, the last lines of any rank that fails; exit status its outcome).",
        ),
        click.Option(["--reason", "-r"], help="ml-training, with --start: why this run (kept in its audit trail)."),
        click.Option(
            ["--to"],
            type=click.Path(file_okay=False, dir_okay=True),
            help="ml-training, with --outputs: the directory to copy the run's outputs into.",
        ),
        click.Option(
            ["--trial"],
            help="ml-training sweeps, with --logs: the log of trial N (or `best`); with --start: trial N (or `best`) "
            "as a normal run of the same image with its values.",
        ),
        click.Option(
            ["--nodes"],
            type=click.IntRange(min=1),
            help="ml-training sweeps, with --start --trial: the nodes of the full run [the job's nodes].",
        ),
        click.Option(
            ["--from", "from_run"],
            metavar="RUN",
            help="ml-training, with --start: a new run that continues RUN (ended, with output_pvc): its working "
            "directory begins with RUN's outputs and checkpoints on the same claim; RUN's manifests and dataset "
            "versions unless -i names another run's.",
        ),
        click.Option(
            ["--force"],
            is_flag=True,
            help="ml-training sweeps, with --start --trial N: start a trial that did not complete (failed, pruned, "
            "no metric) all the same.",
        ),
    ],
    ml_only=("job_path", "follow", "reason", "to", "trial", "nodes", "force", "from_run"),
    is_ml=names_ml_job,
    run_ml=ml_errors(execute_ml),
)
