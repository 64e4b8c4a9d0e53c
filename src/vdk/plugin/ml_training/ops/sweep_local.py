"""`vdk run --full` of a sweep: its trials on this machine, one after another, each a full run of the job with the
trial's values (local/launch_plan.full_plan), searched by Optuna as on the cluster (runtime/sweep_study.py: the
same sampler, pruner and metric), the study in an SQLite file beside the full runs' directories, with a link to
each trial's run directory (`trial-N`: the sweep's TensorBoard, ops/boards.py). A trial the pruner stops is stopped
at once (its processes) and said in one line: the sweep working, not a failure (no diagnosis of the run it
stopped); a failed one is recorded and the sweep goes on; the first trials all failing stop it, saying why. With
MLFLOW_TRACKING_URI set, the sweep is an MLflow run and its trials are its children."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s.sweep_manifests import STUDY_FILE
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.local.launcher import full_runs_dir
from vdk.plugin.ml_training.ops.plan_runner import run_plan
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime import mlflow_runs
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime import sweep_study
from vdk.plugin.ml_training.runtime.series import RunFacts

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
    from vdk.plugin.ml_training.ops.local_result import LocalRunResult
    from vdk.plugin.ml_training.ops.sweeps import SweepTable

POLL_SECONDS = 1.0
TRIAL_LINK = "trial-"  # trial-N in the sweep's folder: the trial's run directory (ops/boards.py reads them)


@dataclass(frozen=True)
class LocalSweep:
    """A sweep run on this machine: its study's table (runtime/sweep_study.snapshot) and where the study is."""

    spec: MLJobSpec
    snapshot: dict
    study: Path

    @property
    def passed(self) -> bool:
        """Always: run_sweep returns once every trial ran (a sweep that stopped raised, saying why)."""
        return True

    @property
    def error(self) -> MLTrainingError | None:
        return None

    @property
    def table(self) -> SweepTable:
        """The trial table, sorted by the metric, as `vdk show` has it for a sweep on the cluster."""
        from vdk.plugin.ml_training.ops.sweeps import trial_table

        return trial_table(self.snapshot, 0.0)

    def to_dict(self) -> dict:
        return {"job_name": self.spec.name, "study": str(self.study), **self.snapshot}


@checked
def run_sweep(spec: MLJobSpec, reporter: Reporter | None = None) -> LocalSweep:
    """Every trial of the sweep of `spec` as a full run on this machine, one after another; each trial's values
    and how it ended are notes, its run's start and end run events of `reporter`."""
    reporter = or_quiet(reporter)
    sweep = spec.sweep
    assert sweep is not None
    folder = full_runs_dir() / f"{spec.name}-sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    study_file = folder / STUDY_FILE
    wire_sweep = sweep.to_wire(study=spec.name)
    study = sweep_study.open_study(wire_sweep, f"sqlite:///{study_file}")
    parent = MlflowParent.start(spec, wire_sweep, folder, reporter.note)
    status = mlflow_runs.FAILED
    try:
        for number in range(sweep.trials):
            reason = sweep_study.stop_reason(study, wire_sweep)
            if reason:
                study.set_user_attr(sweep_study.STOPPED, reason)
                raise MLTrainingError(
                    f"the sweep of {spec.name} stopped: {reason}",
                    f"fix what the trials' logs say (in {folder}), then run the sweep again",
                )
            trial = sweep_study.ask(study, wire_sweep)
            state = _run_trial(spec, wire_sweep, study, trial, folder, reporter, parent)
            reporter.note(f"trial {trial.number} {state} ({number + 1} of {sweep.trials})")
        snapshot = sweep_study.snapshot(study, wire_sweep)
        status = mlflow_runs.FINISHED
    finally:
        if parent is not None:
            parent.end(status, sweep_study.snapshot(study, wire_sweep), wire_sweep)
    return LocalSweep(spec, snapshot, study_file)


class _TrialReporter(Reporter):
    """The caller's reporter for a trial's run, but for the end of a run the pruner stopped: that is the sweep
    working, said in one line by the sweep, not a run that died (no summary, no diagnosis of its stopped ranks)."""

    def __init__(self, inner: Reporter, pruned: threading.Event):
        self.inner, self.pruned = inner, pruned

    @property
    def progress(self) -> Progress:
        return self.inner.progress

    def note(self, text: str) -> None:
        self.inner.note(text)

    def run_starting(self, plan: LaunchPlan) -> None:
        self.inner.run_starting(plan)

    def run_interrupted(self, plan: LaunchPlan, error: KeyboardInterrupt) -> None:
        self.inner.run_interrupted(plan, error)

    def run_ended(self, result: LocalRunResult) -> None:
        if not self.pruned.is_set():
            self.inner.run_ended(result)


@dataclass
class MlflowParent:
    """The sweep's MLflow run, its trials' parent, when MLFLOW_TRACKING_URI names a server (runtime/mlflow_runs.py)."""

    rest: mlflow_runs.MlflowRest
    mlflow_run_id: str
    say: Say

    @classmethod
    def start(cls, spec: MLJobSpec, sweep: wire.Sweep, folder: Path, say: Say) -> MlflowParent | None:
        from vdk.plugin.ml_training.source.audit import collect

        provenance = collect(spec.job_dir)
        facts = RunFacts(run=folder.name, job=spec.name, team=spec.team or "", commit=provenance.git_commit or "")
        params = {
            "sweep.metric": sweep.metric,
            "sweep.goal": sweep.goal,
            "sweep.algorithm": sweep.algorithm,
            "sweep.trials": str(sweep.trials),
        }
        try:
            made = mlflow_runs.parent_run(facts, params)
        except mlflow_runs.MlflowError as e:
            say(f"note: the sweep is not logged to MLflow ({e}); its trials are, each on its own")
            return None
        if made is None:
            return None
        say(f"MLflow: the sweep is run {made[1]}, its trials its children")
        return cls(made[0], made[1], say)

    def end(self, status: str, snapshot: dict, sweep: wire.Sweep) -> None:
        best = next((t for t in snapshot.get("trials", []) if t["number"] == snapshot.get("best")), None)
        try:
            if best is not None and best.get("metric") is not None:
                now = int(time.time() * 1000)
                metric = {"key": f"best_{sweep.metric}", "value": best["metric"], "timestamp": now, "step": 0}
                self.rest.log_batch(self.mlflow_run_id, [metric], {"best_trial": str(best["number"])})
            self.rest.end_run(self.mlflow_run_id, status, int(time.time() * 1000))
        except mlflow_runs.MlflowError as e:
            self.say(f"note: the sweep's MLflow run {self.mlflow_run_id} was not ended ({e})")


def _run_trial(
    spec, sweep: wire.Sweep, study, trial, folder: Path, reporter: Reporter, parent: MlflowParent | None
) -> str:
    engine = sweep_study.optuna()
    params = dict(trial.params)
    reporter.note(f"trial {trial.number}: " + ", ".join(f"{k}={wire.format_value(v)}" for k, v in params.items()))
    metric_file = Path(tempfile.mkstemp(prefix=f"trial-{trial.number}-", suffix=".metric", dir=folder)[1])
    plan = full_plan(spec.trial(params))
    env = {**plan.env, **wire.metric_environment(plan.env, sweep.metric, str(metric_file), params)}
    if parent is not None:
        env[protocol.MLFLOW_PARENT] = parent.mlflow_run_id
    plan = dataclasses.replace(plan, env=env)
    reports = sweep_study.TrialReports(trial, metric_file, sweep.prune)
    starter = HostStarter()  # whose run the pruner stops
    pruned = threading.Event()
    done = threading.Event()

    def follow() -> None:
        while not done.wait(POLL_SECONDS):
            if reports.poll():
                pruned.set()
                starter.stop_running()
                return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        result = run_plan(plan, _TrialReporter(reporter, pruned), starter=starter)
    finally:
        done.set()
        follower.join()
    (folder / f"{TRIAL_LINK}{trial.number}").symlink_to(result.run.run_dir)  # the sweep's trials, side by side
    if not pruned.is_set():
        reports.poll()
    last = reports.last
    if pruned.is_set():
        study.tell(trial, state=engine.trial.TrialState.PRUNED)
        at = f" at step {last[0]} ({sweep.metric} {last[1]:.6g})" if last is not None else ""
        return (
            f"{sweep_study.PRUNED}{at}: the pruner stopped it, its {sweep.metric} worse than the median of the "
            "completed trials at that step"
        )
    if not result.passed:
        why = result.finding.what if result.finding is not None else "the run failed"
        trial.set_user_attr(sweep_study.WHY, why)
        study.tell(trial, state=engine.trial.TrialState.FAIL)
        return sweep_study.FAILED
    if last is None:
        trial.set_user_attr(sweep_study.WHY, f"the script never reported {sweep.metric}")
        study.tell(trial, state=engine.trial.TrialState.FAIL)
        return sweep_study.FAILED
    study.tell(trial, last[1])
    return sweep_study.COMPLETE
