"""A hyperparameter sweep on the cluster as use cases: its trials as a table sorted by the metric, the best one
marked, with the GPU-hours each held and those pruning saved (`vdk show`, and one row of `vdk list`); the log
of one trial (`vdk execute --logs --trial N`); and a trial — the best by default — started as a normal run of
the same image with its values (`vdk execute --start --trial best [--nodes 4]`), whose record names the sweep
and the trial. Cancelling and deleting a sweep are those of any run (ops/runs.py): its study goes with it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.gpu_hours import gpu_share
from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import named_run
from vdk.plugin.ml_training.ops.scope import select_runs
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime import sweep_study
from vdk.plugin.ml_training.runtime.sweep_protocol import MAX
from vdk.plugin.ml_training.vocabulary.human_units import counted

BEST = "best"
_ORDER = {
    sweep_study.COMPLETE: 0,
    sweep_study.PRUNED: 1,
    sweep_study.RUNNING: 2,
    sweep_study.WAITING: 3,
    sweep_study.FAILED: 4,
}


@dataclass(frozen=True)
class TrialRow:
    """One trial of the table."""

    number: int
    state: str
    params: dict
    metric: float | None
    steps: int | None
    seconds: float | None
    gpu_hours: float | None
    best: bool
    slot: int | None = None
    why: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SweepTable:
    """A study's trials sorted by the metric (complete ones first, best first), and what the sweep amounts to."""

    metric: str
    goal: str
    planned: int
    rows: list[TrialRow]
    stopped: str | None
    finished: bool
    saved_gpu_hours: float  # what pruning saved: the typical complete trial's time a pruned one did not take

    def count(self, state: str) -> int:
        return sum(1 for row in self.rows if row.state == state)

    @property
    def best(self) -> TrialRow | None:
        return next((row for row in self.rows if row.best), None)

    def summary(self) -> dict:
        """The row of `vdk list`: how many trials ended how, and the best metric so far."""
        best = self.best
        return {
            "trials": self.planned,
            "done": self.count(sweep_study.COMPLETE),
            "running": self.count(sweep_study.RUNNING),
            "pruned": self.count(sweep_study.PRUNED),
            "failed": self.count(sweep_study.FAILED),
            "metric": self.metric,
            "best_trial": best.number if best else None,
            "best_metric": best.metric if best else None,
            "stopped": self.stopped,
        }

    def to_dict(self) -> dict:
        return {
            **self.summary(),
            "goal": self.goal,
            "finished": self.finished,
            "saved_gpu_hours": round(self.saved_gpu_hours, 4),
            "table": [row.to_dict() for row in self.rows],
        }


def trial_table(snapshot: dict, gpus_per_trial: float) -> SweepTable:
    """The study's snapshot (runtime/sweep_study.snapshot) as the table `vdk show` prints."""
    goal = snapshot.get("goal")
    trials = list(snapshot.get("trials") or [])
    best = snapshot.get("best")

    def key(t: dict) -> tuple:
        metric = t.get("metric")
        if metric is None:
            return (_ORDER.get(t["state"], 5), 1, 0.0, t["number"])
        return (_ORDER.get(t["state"], 5), 0, -metric if goal == MAX else metric, t["number"])

    rows = [
        TrialRow(
            number=t["number"],
            state=t["state"],
            params=dict(t.get("params") or {}),
            metric=t.get("metric"),
            steps=t.get("steps"),
            seconds=t.get("seconds"),
            gpu_hours=None if t.get("seconds") is None else round(t["seconds"] * gpus_per_trial / 3600, 4),
            best=t["number"] == best,
            slot=t.get("slot"),
            why=t.get("why"),
        )
        for t in sorted(trials, key=key)
    ]
    saved = sweep_study.pruned_savings_seconds(trials) * gpus_per_trial / 3600
    return SweepTable(
        metric=str(snapshot.get("metric")),
        goal=str(goal),
        planned=int(snapshot.get("trials_planned") or len(trials)),
        rows=rows,
        stopped=snapshot.get("stopped"),
        finished=bool(snapshot.get("finished")),
        saved_gpu_hours=saved,
    )


def gpus_per_trial(run: RunSummary) -> float:
    """What one trial holds: the run's accelerators of one pod (a MIG slice is its share of a GPU)."""
    return run.gpus_per_node * gpu_share(run.gpu_resource)


@dataclass(frozen=True)
class SweepDetail:
    """A sweep run and its trial table (None, with `why`, while its study has not reported)."""

    run: RunSummary
    table: SweepTable | None
    why: str | None = None

    def to_dict(self) -> dict:
        return {
            "run": self.run.name,
            "phase": self.run.phase,
            "settings": self.run.sweep,
            "study": self.table.to_dict() if self.table else None,
            "why": self.why,
        }


def sweep_detail(client: Any, run: RunSummary) -> SweepDetail:
    """The trial table of a sweep run, read from its study pod's log."""
    from vdk.plugin.ml_training.k8s.sweep_status import study_snapshot

    snapshot, why = study_snapshot(client, run)
    if snapshot is None:
        return SweepDetail(run, None, why)
    return SweepDetail(run, trial_table(snapshot, gpus_per_trial(run)))


@checked
def show_sweep(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> SweepDetail:
    """The sweep `run_id` of the scope's job (default its latest sweep)."""
    selection = select_runs(scope, execute_command("show", run_id), reporter=reporter)
    return sweep_detail(selection.client, pick_sweep(selection, run_id, "show"))


def pick_sweep(selection: JobSelection, run_id: str | None, operation: str) -> RunSummary:
    """The sweep `run_id` names, else the job's latest sweep; an error that says what to do otherwise."""
    if run_id is not None:
        run = named_run(selection, run_id, execute_command(operation, run_id))
        if run.sweep is None:
            raise MLTrainingError(
                f"run {run.name} is not a sweep, so it has no trials",
                "name a sweep with -i, or leave -i out for the job's latest sweep",
            )
        return run
    sweeps = [run for run in selection.runs if run.sweep is not None]
    if not sweeps:
        raise MLTrainingError(
            f"{selection.describe()} has no sweep among its runs",
            "deploy a job with an [ml-training.sweep] section first (see docs/sweeps.md)",
        )
    return sweeps[0]


def choose_trial(table: SweepTable, trial: str) -> TrialRow:
    """The row `trial` names: `best`, or a trial number."""
    if trial == BEST:
        if table.best is None:
            raise MLTrainingError(
                "the sweep has no completed trial yet, so no best one",
                "wait for a trial to complete (`vdk show -n JOB` shows them), or name one with --trial N",
            )
        return table.best
    if not trial.isdigit():
        raise MLTrainingError(f"--trial {trial}: not a trial", "write --trial best, or a trial's number (vdk show)")
    for row in table.rows:
        if row.number == int(trial):
            return row
    numbers = ", ".join(str(r.number) for r in sorted(table.rows, key=lambda r: r.number)) or "none yet"
    raise MLTrainingError(f"the sweep has no trial {trial}", f"its trials are: {numbers}")


# --- vdk execute --logs --trial N -------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialLog:
    run: RunSummary
    trial: TrialRow
    pod: str | None
    text: str | None
    why: str | None

    def to_dict(self) -> dict:
        return {"run": self.run.name, "trial": self.trial.to_dict(), "pod": self.pod, "log": self.text, "why": self.why}


@checked
def trial_log(scope: Scope, trial: str, run_id: str | None = None, reporter: Reporter | None = None) -> TrialLog:
    """The log of the pod that ran trial `trial` (a number, or `best`) of the sweep `run_id` (default the latest)."""
    from vdk.plugin.ml_training.k8s.sweep_status import trial_log as read_log
    from vdk.plugin.ml_training.k8s.sweep_status import trial_pod

    selection = select_runs(scope, execute_command("logs", run_id), reporter=reporter)
    run = pick_sweep(selection, run_id, "logs")
    detail = sweep_detail(selection.client, run)
    if detail.table is None:
        raise MLTrainingError(f"the trials of {run.name} are not known yet: {detail.why}", "try again in a minute")
    row = choose_trial(detail.table, trial)
    if row.slot is None:
        return TrialLog(run, row, None, None, f"trial {row.number} was not run by a pod of {run.name}")
    pod = trial_pod(selection.client, run, int(row.slot))
    if pod is None:
        return TrialLog(run, row, None, None, f"the pod of trial {row.number} is gone (removed with its Job)")
    text, why = read_log(selection.client, pod)
    return TrialLog(run, row, pod["metadata"]["name"], text, why)


# --- vdk execute --start --trial best [--nodes N] ------------------------------------------------------------


@dataclass(frozen=True)
class StartedTrial:
    """A trial of a sweep started as a normal run."""

    selection: JobSelection
    sweep: RunSummary
    trial: TrialRow
    run_name: str
    backend: str
    image: str
    nodes: str
    created: list[str]

    def to_dict(self) -> dict:
        return {
            "job_name": self.selection.job_name,
            "job_team": self.selection.team_name,
            "run": self.run_name,
            "from_sweep": self.sweep.name,
            "trial": self.trial.number,
            "params": self.trial.params,
            "metric": self.trial.metric,
            "backend": self.backend,
            "nodes": self.nodes,
            "image": self.image,
            "namespace": self.selection.client.namespace,
            "created": list(self.created),
        }


@checked
def start_trial(
    scope: Scope,
    trial: str = BEST,
    nodes: int | None = None,
    reason: str | None = None,
    run_id: str | None = None,
    reporter: Reporter | None = None,
    force: bool = False,
) -> StartedTrial:
    """Start trial `trial` (default the best) of the sweep `run_id` (default the job's latest) as a normal run:
    the sweep's image and spec with the trial's values, on `nodes` nodes (default the job's), on the job's
    backend; its annotations and record name the sweep and the trial. A trial that did not complete with a
    metric (failed, pruned, still running, a NaN) is refused unless `force`: its values failed (or never finished)
    once already, on one node."""
    from vdk.plugin.ml_training.job.model import NodeRange
    from vdk.plugin.ml_training.job.record_spec import spec_from_record
    from vdk.plugin.ml_training.k8s.backends import choose_backend
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
    from vdk.plugin.ml_training.layout import JobImage
    from vdk.plugin.ml_training.ops.deploy_plan import Target
    from vdk.plugin.ml_training.ops.deploy_plan import plan_run
    from vdk.plugin.ml_training.source.audit import Provenance
    from vdk.plugin.ml_training.source.audit import deployer

    selection = select_runs(scope, execute_command("start", run_id), changes=True, reporter=reporter)
    client = selection.client
    sweep_run = pick_sweep(selection, run_id, "start")
    detail = sweep_detail(client, sweep_run)
    if detail.table is None:
        raise MLTrainingError(f"the trials of {sweep_run.name} are not known yet: {detail.why}", "try again soon")
    row = choose_trial(detail.table, trial)
    record = client.read_run_record(sweep_run.name)
    spec = spec_from_record(record.spec).trial(row.params)
    if nodes is not None:
        if nodes < 1:
            raise MLTrainingError(f"--nodes {nodes}: a run needs at least one node", "write --nodes 1 or more")
        spec = dataclasses.replace(spec, nodes=NodeRange(nodes, nodes))
    finite = row.metric is not None and row.metric == row.metric  # not NaN
    if not force and (row.state != sweep_study.COMPLETE or not finite):
        how = f"{row.state}" + (f": {row.why}" if row.why else "") + ("" if finite else ", no metric")
        raise MLTrainingError(
            f"trial {row.number} of {sweep_run.name} did not complete ({how}); started in full it would take "
            f"{counted(spec.nodes.max, 'node')} with {spec.gpus_per_node.describe()}"
            f"{' each' if spec.nodes.max > 1 else ''} for values that failed on one node already",
            f"start the best trial (`--trial best`) or another complete one (`vdk show -n {selection.job_name}` lists "
            f"them); to start this one all the same, add --force",
        )
    discovery = client.discover()
    backend = choose_backend(discovery, spec.backend, spec.nodes.elastic)
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    provenance = Provenance(**{**record.provenance, "deployer": deployer(), "created": now})
    origin = json.dumps({"sweep": sweep_run.name, "trial": row.number, "params": row.params}, sort_keys=True)
    run = dataclasses.replace(
        RunInfo.create(
            spec,
            provenance,
            reason=reason,
            image_digest=sweep_run.image_digest,
            dependencies=tuple(record.dependencies.items()),
        ),
        from_sweep=origin,
    )
    python = _image_python(record.manifests)
    target = Target(client.namespace, "the sweep's namespace", backend, client, discovery)
    plan = plan_run(spec, target, JobImage(record.image, python), run, or_quiet(reporter).note)
    created = client.apply(plan.manifests)
    return StartedTrial(
        selection,
        sweep_run,
        row,
        run.name,
        backend,
        record.image,
        str(spec.nodes),
        [f"{m['kind']}/{m['metadata']['name']}" for m in created],
    )


def _image_python(manifests: list[dict]) -> str:
    """The interpreter the sweep's pods start (its image's), from the first container of its trials Job."""
    containers = (((manifests[0].get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    return (containers or [{}])[0].get("command", ["python"])[0]
