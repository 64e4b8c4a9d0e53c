"""`vdk diff -n JOB RUN_A RUN_B`: two runs of a job side by side — what changed from the first to the second
(ops/run_changes.py: code, requirements, configuration, base image, data) and how each ended (phase, final loss
and metrics of its last progress line, duration, GPU-hours).

    diff = diff_runs(find_scope("mnist"), "k3x9p2qa", "m7d1c0zz")
    diff.changes.changed_parts               # ["code", "data"]
    diff.to_dict()                           # what `-o json` prints (the changes under "diff", as before)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.deploy_changes import run_state
from vdk.plugin.ml_training.ops.run_changes import RunChanges
from vdk.plugin.ml_training.ops.run_changes import changes_between
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import named_run
from vdk.plugin.ml_training.ops.scope import select_runs
from vdk.plugin.ml_training.ops.typed_calls import checked

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
    from vdk.plugin.ml_training.ops.reporting import Reporter


@dataclass(frozen=True)
class Outcome:
    """How a run ended (or stands): its phase, the last progress line's loss and other values, how long it ran,
    the GPU-hours it held."""

    run: str
    phase: str
    loss: float | None
    metrics: dict  # the last progress line's other values (eval_loss, accuracy, ...)
    step: int | None
    started: str | None
    ended: str | None
    seconds: float | None  # from start to end (or to now while it runs)
    gpu_hours: float | None  # None: it never started, or holds no accelerator
    continues: str | None = None  # the run whose outputs and checkpoints it began with (vdk execute --start --from)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DiffResult:
    """What `vdk diff` returns: how each of two runs of a job ended (`before`, `after`) and what changed from the
    first to the second (`changes`)."""

    job_name: str
    namespace: str
    before: Outcome
    after: Outcome
    changes: RunChanges

    def to_dict(self) -> dict:
        return {
            "kind": "ml-training-diff",
            "job_name": self.job_name,
            "namespace": self.namespace,
            "runs": [self.before.to_dict(), self.after.to_dict()],
            "diff": self.changes.to_dict(),  # the JSON's name, kept
        }


@checked
def diff_runs(scope: Scope, run_a: str, run_b: str, reporter: Reporter | None = None) -> DiffResult:
    """What changed from run `run_a` to run `run_b` of the scope's job (each its name, or the part after the
    job's name), and how each ended."""
    for which, run in (("RUN_A", run_a), ("RUN_B", run_b)):
        if not isinstance(run, str) or not run.strip():
            raise MLTrainingError(
                f"vdk diff compares two runs, and {which} is {'empty' if isinstance(run, str) else 'no name'} "
                f"({run!r}): it names no run, not the latest one",
                f"give both runs' names: `vdk diff -n {scope.job_name or 'JOB'} RUN_A RUN_B` (`vdk execute --list "
                f"-n {scope.job_name or 'JOB'}` lists them)",
            )
    selection = select_runs(scope, "diff", reporter=reporter)
    client = selection.client
    first = named_run(selection, run_a, "diff")
    second = named_run(selection, run_b, "diff")
    changes = changes_between(run_state(client, first), run_state(client, second))
    return DiffResult(selection.job_name, client.namespace, outcome(client, first), outcome(client, second), changes)


def outcome(client: KubeClient, run: RunSummary) -> Outcome:
    from vdk.plugin.ml_training.k8s import gpu_hours
    from vdk.plugin.ml_training.k8s.runs.observe import inspect_run
    from vdk.plugin.ml_training.k8s.runs.observe import run_pods

    pods = run_pods(client, run)
    detail = inspect_run(client, run, pods)
    progress = detail.progress
    now = datetime.now(timezone.utc)
    usage = gpu_hours.run_usage(run, pods, now)
    start, end = gpu_hours.parse_time(run.started), gpu_hours.parse_time(run.ended)
    seconds = ((end or now) - start).total_seconds() if start else None
    hours = round(usage.hours(usage.start, now), 4) if usage is not None and usage.gpus else None
    metrics = {k: v for k, v in (progress.fields if progress else {}).items() if k not in ("step", "loss")}
    return Outcome(
        run=run.name,
        phase=detail.phase,
        loss=progress.loss if progress else None,
        metrics=metrics,
        step=progress.step if progress else None,
        started=run.started,
        ended=run.ended,
        seconds=seconds,
        gpu_hours=hours,
        continues=run.continues,
    )
