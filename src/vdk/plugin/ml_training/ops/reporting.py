"""What a use case tells as it goes, through one parameter: a `Reporter`. Its notes (one line each: what it does,
what to know), its progress (stages, transfers and waits of an image build or a data fetch: image/build_progress),
and the events of the runs it starts or follows. Every use case takes `reporter=None`: quiet (this class, whose
methods do nothing). Subclass it and override what you want to see; `StderrReporter` shows the notes and the
progress on stderr, as a notebook wants them; the command line's shows everything as `vdk` prints it
(cli/console.py). Results are what the use cases return, never what they report (stdout stays the caller's).

    class Notes(Reporter):
        def note(self, text: str) -> None:
            print(text)

    deploy(spec, reporter=Notes())
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import StderrProgress
from vdk.plugin.ml_training.secret_patterns import printable

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.runs.pod_states import RankFailure
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
    from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
    from vdk.plugin.ml_training.ops.deploy_changes import Changes
    from vdk.plugin.ml_training.ops.local_result import LocalRunResult

# A callable that takes one note (reporter.note): what the helpers of a use case are handed.
Say = Callable[[str], None]

_SILENT = Progress()


class Reporter:
    """Quiet: every event is dropped. Override the ones to show; each is called from the thread that does the
    work (the notes of a deploy's remote checks from theirs), so a method that keeps state takes a lock."""

    @property
    def progress(self) -> Progress:
        """Where an image build, an image loaded into a container engine and a full run's data fetch show their
        stages, transfers and long waits (default: nowhere)."""
        return _SILENT

    def note(self, text: str) -> None:
        """One line (it may hold several): what the use case does now, a wait, a warning, a note to know."""

    # --- a run on this machine (vdk run, the smoke check before a deploy, a sweep's trials) ----------------

    def run_starting(self, plan: LaunchPlan) -> None:
        """A local run is about to start (the plan says which run, where, for how long)."""

    def run_interrupted(self, plan: LaunchPlan, error: KeyboardInterrupt) -> None:
        """The caller was asked to stop (Ctrl-C, SIGTERM, SIGHUP): every process of the run was stopped."""

    def run_ended(self, result: LocalRunResult) -> None:
        """A local run ended, passed or not (the same result the use case goes on with)."""

    # --- a deploy -------------------------------------------------------------------------------------------

    def changes(self, changes: Changes) -> None:
        """What a deploy changes since the job's last run and last successful run, before it starts anything."""

    # --- a run on the cluster, followed or deleted ------------------------------------------------------------

    def following(self, run: RunSummary, selection: JobSelection | None) -> None:
        """A run is followed to its end from now (`selection`: the runs it was picked from; None for the run a
        deploy just started)."""

    def log_line(self, rank: str, line: str) -> None:
        """A line a followed run's rank wrote (rank 0's only when a run is followed to its end)."""

    def rank_failed(self, failure: RankFailure) -> None:
        """A container of a followed run's rank failed (its last lines in `failure.tail`)."""

    def run_deleted(self, run: RunSummary) -> None:
        """A run was deleted (one event per run, as each goes)."""

    # --- an execution of the VDK Control Service, followed ------------------------------------------------------

    def execution_line(self, line: str) -> None:
        """A line of the execution's log as the Control Service serves it (its timestamp taken off; the launcher's
        lines, rank 0's among them), or a note that its pod was started again."""


QUIET = Reporter()


def or_quiet(reporter: Reporter | None) -> Reporter:
    """`reporter`, or the quiet one."""
    return QUIET if reporter is None else reporter


class StderrReporter(Reporter):
    """Notes and progress on stderr (a terminal gets bars), as a notebook or a script wants them beside its own
    output, a note's control characters escaped (it may quote what a server or a pod said); the run events stay
    quiet (their results say it all)."""

    def __init__(self) -> None:
        self._progress = StderrProgress()

    @property
    def progress(self) -> Progress:
        return self._progress

    def note(self, text: str) -> None:
        sys.stderr.write(f"{printable(text)}\n")  # a note may quote a server's or a pod's words: escaped
        sys.stderr.flush()
