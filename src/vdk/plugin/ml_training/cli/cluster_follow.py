"""Following a run on the command line (`vdk deploy -p JOB --follow`, `vdk execute --show --follow`): rank 0's
lines on stdout as `[rank 0] ...`, the last lines of each rank that fails as it fails (cli/console.py shows both),
then how the run ended with the diagnosis and fix of a failure; the exit status is the run's outcome (0
succeeded, 1 not). Ctrl-C (and SIGTERM, SIGHUP) detaches: nothing is cancelled, and a line says how to follow the
run again or cancel it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import NoReturn

import click

from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli.console import Console

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import FollowedRun

# follow(reporter) -> FollowedRun: api.follow_run or api.follow_deployed, bound
Follow = Callable[[Console], "FollowedRun"]


def follow_and_exit(follow: Follow, run_name: str | None = None, again: str | None = None) -> NoReturn:
    """Follow the run to its end and exit with its outcome. `run_name` and `again` (`-n JOB [-t TEAM]` of the
    commands said when it detaches): the run's, by default those of the run the reporter is told it follows."""
    console = Console()
    try:
        with interrupts.stop_on_signals():
            followed = follow(console)
    except KeyboardInterrupt as e:
        if console.followed is not None:
            from vdk.plugin.ml_training.cli.cluster_scope import team_args

            run, selection = console.followed
            run_name = run.name
            if again is None and selection is not None:
                again = f"-n {selection.job_name}{team_args(selection)}"
        if run_name is None or again is None:  # stopped before a run was picked: as any verb stops
            raise
        interrupted = interrupts.as_interrupted(e)
        interrupts.exit_interrupted(
            e,
            f"\nDetached from {run_name} ({interrupted.name}); it goes on, nothing was cancelled.\n"
            f"  follow it again:  vdk execute --show {again} -i {run_name} --follow\n"
            f"  cancel it:        vdk execute --cancel {again} -i {run_name}",
        )
    show_end(followed)
    raise click.exceptions.Exit(0 if followed.succeeded else 1)


def show_end(followed: FollowedRun) -> None:
    """How a followed run ended, and the diagnosis of a failure, on stderr."""
    run = followed.run
    if followed.succeeded:
        click.echo(f"{run.name} Succeeded", err=True)
        return
    click.echo(f"{run.name} {followed.detail.phase if followed.detail else run.phase}", err=True)
    findings = followed.detail.findings if followed.detail is not None else []
    for finding in findings:
        click.echo(f"  {finding.what}", err=True)
        if finding.fix:
            click.echo(f"  Fix: {finding.fix}", err=True)
    if not findings and run.message:
        click.echo(f"  {run.message}", err=True)
