"""Following a run on the command line (`vdk deploy -p JOB --follow`, `vdk execute --show --follow`): rank 0's
lines on stdout as `[rank 0] ...`, the last lines of each rank that fails as it fails, then how the run ended
with the diagnosis and fix of a failure; the exit status is the run's outcome (0 succeeded, 1 not). Ctrl-C (and
SIGTERM, SIGHUP) detaches: nothing is cancelled, and a line says how to follow the run again or cancel it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import NoReturn

import click

from vdk.plugin.ml_training.cli import interrupts

if TYPE_CHECKING:
    from vdk.plugin.ml_training.ops.follow import FollowedRun
    from vdk.plugin.ml_training.ops.follow import RankFailure

# follow(rank0=..., failed=..., say=...) -> FollowedRun: ops/follow.py's follow_run or follow_job_run, bound
Follow = Callable[..., "FollowedRun"]


def follow_and_exit(follow: Follow, run_name: str, again: str) -> NoReturn:
    """Follow the run to its end and exit with its outcome; `again`: `-n JOB [-t TEAM]` of the commands said."""
    click.echo(f"Following {run_name}: rank 0's output, and the last lines of any rank that fails (Ctrl-C detaches; "
               "the run goes on)", err=True)  # fmt: skip
    try:
        with interrupts.stop_on_signals():
            followed = follow(rank0=lambda line: click.echo(f"[rank 0] {line}"), failed=_failed, say=_say)
    except KeyboardInterrupt as e:
        interrupted = interrupts.as_interrupted(e)
        interrupts.exit_interrupted(
            e,
            f"\nDetached from {run_name} ({interrupted.name}); it goes on, nothing was cancelled.\n"
            f"  follow it again:  vdk execute --show {again} -i {run_name} --follow\n"
            f"  cancel it:        vdk execute --cancel {again} -i {run_name}",
        )
    _ended(followed)
    raise click.exceptions.Exit(0 if followed.succeeded else 1)


def _say(text: str) -> None:
    click.echo(text, err=True)


def _failed(failure: RankFailure) -> None:
    instance = "its previous container " if failure.restarted else ""
    click.echo(f"[rank {failure.rank}] {instance}{failure.ended} (pod {failure.pod})", err=True)
    if failure.unavailable:
        click.echo(f"[rank {failure.rank}] no log: {failure.unavailable}", err=True)
        return
    if failure.tail:
        click.echo(f"[rank {failure.rank}] its last {len(failure.tail)} lines:", err=True)
    for line in failure.tail:
        click.echo(f"[rank {failure.rank}] | {line}")


def _ended(followed: FollowedRun) -> None:
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
