"""The logs of every rank of a run (`vdk execute --logs`), read once or followed as they are written; a rank
without a log says why (pending, pulling its image, ...), and a run without pods says why it has none. The
reading itself is k8s/runs/observe.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.runs import observe
from vdk.plugin.ml_training.k8s.runs.observe import RankLog
from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import pick_run
from vdk.plugin.ml_training.ops.typed_calls import checked


@dataclass(frozen=True)
class RunLogs:
    """The log of every rank of a run, in rank order (none when it has no pods: `why_no_pods()` says why, or
    when they could not be listed: `notes` says so)."""

    selection: JobSelection
    run: RunSummary
    ranks: list[RankLog]
    notes: list[str] = field(default_factory=list)  # what could not be read (the pods list: then no ranks)

    def why_no_pods(self) -> str:
        """Why the run has no pods (queued, not created yet, cleaned up after it ended), in one line; asks
        the cluster (its events, Kueue)."""
        return observe.why_no_pods(self.selection.client, self.run)

    @property
    def any_read(self) -> bool:
        """Whether the log of at least one rank (its container now, or the one before a restart) was read."""
        return any(entry.current is not None or entry.previous is not None for entry in self.ranks)

    def unread(self) -> MLTrainingError | None:
        """The error of a read that gave no log at all (the command exits non-zero), saying why; None when one
        was read."""
        if self.any_read:
            return None
        job = f"-n {self.selection.job_name}"
        if not self.ranks and any(note.startswith("pods ") for note in self.notes):
            namespace = self.selection.client.namespace
            return MLTrainingError(
                f"no log of {self.run.name} could be read: its pods could not be listed ({'; '.join(self.notes)})",
                f"check that you may read pods and their logs in namespace {namespace} (`kubectl auth can-i list "
                f"pods -n {namespace}`, `kubectl auth can-i get pods/log -n {namespace}`)",
            )
        if not self.ranks and self.run.finished:  # its pods were removed after it ended, their logs with them
            return MLTrainingError(
                f"{self.run.name} has no pods, so no logs: {self.why_no_pods()}",
                f"`vdk show {job} -i {self.run.name}` says how it ended (its pods, and their logs, are gone)",
            )
        if not self.ranks:
            return MLTrainingError(
                f"{self.run.name} has no pods, so no logs: {self.why_no_pods()}",
                f"`vdk show {job}` says why it waits; `vdk execute --logs {job} --follow` waits for its pods and "
                "prints their logs as they come",
            )
        reasons = "; ".join(f"rank {entry.rank.rank}: {entry.unavailable}" for entry in self.ranks)
        return MLTrainingError(
            f"no rank's log of {self.run.name} could be read ({reasons})",
            f"`vdk show {job}` says why its ranks have no log yet; `vdk execute --logs {job} --follow` waits for them",
        )

    def to_dict(self) -> dict:
        return {
            "run": self.run.name,
            "phase": self.run.phase,
            "ranks": [entry.to_dict() for entry in self.ranks],
            "notes": list(self.notes),
        }


@checked
def run_logs(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> RunLogs:
    """The logs of every rank of the run `run_id` of the scope's job (default the latest), each rank's
    previous container's too after a restart."""
    selection, run = pick_run(scope, execute_command("logs", run_id), run_id, partial=True, reporter=reporter)
    notes = list(selection.notes)
    ranks = list(observe.rank_logs(selection.client, run, notes))
    return RunLogs(selection, run, ranks, notes)


def follow_logs(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> RunSummary:
    """Stream every rank's log of the run `run_id` (default the latest) as it is written: `reporter.log_line(rank,
    line)` for each line, a note `[rank R] why` when a rank (or the run) has no log yet. Returns the run's last
    summary once it has finished and every log was read to its end; KeyboardInterrupt stops following (the
    run goes on)."""
    reporter = or_quiet(reporter)
    selection, run = pick_run(scope, execute_command("logs", run_id), run_id, partial=True, reporter=reporter)
    for note in selection.notes:
        reporter.note(f"note: {note}")
    reporter.note(f"Following {run.name} (Ctrl-C stops following; the run goes on)")
    return observe.follow_logs(selection.client, run, reporter.log_line, why_no_log(reporter))


def why_no_log(reporter: Reporter) -> Callable[[str, str], None]:
    """`explain(rank, why)` of k8s/runs/observe.follow_logs: a note `[rank R] why` (`[run] why` for the run)."""

    def explain(rank: str, why: str) -> None:
        reporter.note(f"[{'run' if rank == 'run' else 'rank ' + rank}] {why}")

    return explain
