"""The logs of every rank of a run (`vdk execute --logs`), read once or followed as they are written; a rank
without a log says why (pending, pulling its image, ...), and a run without pods says why it has none. The
reading itself is k8s/observe.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.k8s import observe
from vdk.plugin.ml_training.k8s.observe import RankLog
from vdk.plugin.ml_training.k8s.run_summary import RunSummary
from vdk.plugin.ml_training.k8s.selection import JobSelection
from vdk.plugin.ml_training.ops.notes import Say
from vdk.plugin.ml_training.ops.notes import to_stderr
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import select_runs
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

    def to_dict(self) -> dict:
        return {
            "run": self.run.name,
            "phase": self.run.phase,
            "ranks": [entry.to_dict() for entry in self.ranks],
            "notes": list(self.notes),
        }


@checked
def run_logs(scope: Scope, run_id: str | None = None) -> RunLogs:
    """The logs of every rank of the run `run_id` of the scope's job (default the latest), each rank's
    previous container's too after a restart."""
    command = execute_command("logs", run_id)
    selection = select_runs(scope, command, partial=True)
    run = selection.pick(run_id, f"vdk {command} -n {selection.job_name}")
    notes = list(selection.notes)
    ranks = list(observe.rank_logs(selection.client, run, notes))
    return RunLogs(selection, run, ranks, notes)


def follow_logs(
    scope: Scope,
    run_id: str | None = None,
    *,
    write: Callable[[str, str], None],
    explain: Callable[[str, str], None],
    say: Say = to_stderr,
) -> RunSummary:
    """Stream every rank's log of the run `run_id` (default the latest) as it is written: `write(rank, line)`
    for each line, `explain(rank, why)` when a rank (or "run") has no log yet and why. Returns the run's last
    summary once it has finished and every log was read to its end; KeyboardInterrupt stops following (the
    run goes on)."""
    command = execute_command("logs", run_id)
    selection = select_runs(scope, command, partial=True)
    run = selection.pick(run_id, f"vdk {command} -n {selection.job_name}")
    for note in selection.notes:
        say(f"note: {note}")
    say(f"Following {run.name} (Ctrl-C stops following; the run goes on)")
    return observe.follow_logs(selection.client, run, write, explain)
