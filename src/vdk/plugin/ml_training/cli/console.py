"""What `vdk` prints as a use case goes: the command line's reporter (ops/reporting.Reporter), handed to every
function of the API it calls. Notes and progress go to stderr (stdout is for results), a local run's start line
and summary where its command shows them (cli/local_summary.py renders them), what a deploy changes
(cli/diff_views.py), a followed run's lines and failures, the runs a delete removes. It renders; it decides
nothing."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training.api import StderrReporter
from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.secret_patterns import printable

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Changes
    from vdk.plugin.ml_training.api import LocalRunResult
    from vdk.plugin.ml_training.k8s.runs.pod_states import RankFailure
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
    from vdk.plugin.ml_training.local.launch_plan import LaunchPlan


class Console(StderrReporter):
    """`runs_err`: a local run's start line and summary on stderr (the smoke check before a deploy, whose stdout
    is its result), else on stdout (`vdk run`); `notes_err`: where the notes go (default: with the runs')."""

    def __init__(self, runs_err: bool = True, notes_err: bool | None = None):
        super().__init__()
        self.runs_err = runs_err
        self.notes_err = runs_err if notes_err is None else notes_err
        self.followed: tuple[RunSummary, JobSelection | None] | None = None  # the run being followed
        self.lines = 0  # of a followed run's ranks, shown
        self._lock = threading.Lock()  # the notes of a deploy's remote checks come from their threads

    def note(self, text: str) -> None:
        with self._lock:  # a note may quote a server's or a pod's words: their control characters escaped
            click.echo(printable(text), err=self.notes_err)

    def run_starting(self, plan: LaunchPlan) -> None:
        from vdk.plugin.ml_training.cli.local_summary import format_start

        click.echo(format_start(plan), err=self.runs_err)

    def run_interrupted(self, plan: LaunchPlan, error: KeyboardInterrupt) -> None:
        signal_name = interrupts.as_interrupted(error).name
        click.echo(f"\n{plan.mode} run interrupted by {signal_name}: every process of it was stopped.", err=True)

    def run_ended(self, result: LocalRunResult) -> None:
        from vdk.plugin.ml_training.cli.local_summary import format_agent_log
        from vdk.plugin.ml_training.cli.local_summary import format_summary

        if result.debug:
            click.echo(format_agent_log(result.run.agent_log), err=self.runs_err)
        click.echo(format_summary(result.outcome, result.finding), err=self.runs_err)
        for line in result.turned_off:  # what the smoke run turned off, and how it was checked
            click.echo(f"  {line}", err=self.runs_err)
        for line in result.resume.lines if result.resume is not None else []:  # the second start, after a stop
            click.echo(f"  {line}", err=self.runs_err)
        if result.passed and result.debug:
            click.echo(f"  run files: {result.run.run_dir}", err=self.runs_err)

    def changes(self, changes: Changes) -> None:
        from vdk.plugin.ml_training.cli.diff_views import changes_text

        click.echo(changes_text(changes), err=True)

    def following(self, run: RunSummary, selection: JobSelection | None) -> None:
        self.followed = (run, selection)
        click.echo(f"Following {run.name}: rank 0's output, and the last lines of any rank that fails (Ctrl-C "
                   "detaches; the run goes on)", err=True)  # fmt: skip

    def log_line(self, rank: str, line: str) -> None:
        self.lines += 1
        click.echo(f"[rank {rank}] {line}")

    def rank_failed(self, failure: RankFailure) -> None:
        instance = "its previous container " if failure.restarted else ""
        click.echo(f"[rank {failure.rank}] {instance}{failure.ended} (pod {failure.pod})", err=True)
        if failure.unavailable:
            click.echo(f"[rank {failure.rank}] no log: {failure.unavailable}", err=True)
            return
        if failure.tail:
            click.echo(f"[rank {failure.rank}] its last {len(failure.tail)} lines:", err=True)
        for line in failure.tail:
            click.echo(f"[rank {failure.rank}] | {line}")

    def run_deleted(self, run: RunSummary) -> None:
        click.echo(f"Deleted {run.name}")

    def execution_line(self, line: str) -> None:
        self.lines += 1
        click.echo(line)
