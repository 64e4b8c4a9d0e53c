"""The smoke check of a sweep (`vdk run JOB`, and before `vdk deploy`): no trial may die on a typo after the
others used GPUs, and the trials at the extremes must run.

- Every trial's arguments (the grid's combinations, or `trials` sets drawn over the ranges with both ends) are
  checked by the script's own parser, in one interpreter that forks after the script's imports
  (local/arguments_run.py): milliseconds a trial.
- The trials at the extremes (every parameter at its smallest; every one at its largest: the largest batch)
  run their smoke steps, side by side, as `vdk run` runs a job; each must pass, and report the sweep's metric
  (a metric the script never reports is found here, with the names it does report).

The result is a table of the checked trials and the metric each reported; `error` says what failed and what
to do, as a smoke run's does.
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
import threading
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.local.arguments_run import ArgumentsChecked
from vdk.plugin.ml_training.local.arguments_run import check_arguments
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.ops.local_result import LocalRunFailed
from vdk.plugin.ml_training.ops.local_result import LocalRunResult
from vdk.plugin.ml_training.ops.plan_runner import run_plan
from vdk.plugin.ml_training.ops.reporting import QUIET
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime import argument_check
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime.metrics import read_names
from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.source.job_files import scan_job_dir


@dataclass(frozen=True)
class CheckedTrial:
    """One trial of the check: its values, whether the script accepted its arguments, and for an extreme one its
    smoke run (passed, steps, the metric it reported)."""

    params: dict
    arguments: str  # "accepted", "refused", or "not checked" (the script parses no command line)
    message: str = ""  # argparse's, when refused
    smoke: str | None = None  # "passed" / "failed" for the extremes; None: not run
    metric: float | None = None
    steps: int | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SweepSmoke:
    """The smoke check of a sweep: every trial checked, the extremes' runs, and the error (None: it passed)."""

    spec: MLJobSpec
    trials: list[CheckedTrial]
    arguments: ArgumentsChecked
    runs: list[LocalRunResult] = field(default_factory=list)
    error: MLTrainingError | None = None
    names_seen: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_name": self.spec.name,
            "metric": self.spec.sweep.metric if self.spec.sweep else None,
            "passed": self.passed,
            "arguments": self.arguments.status,
            "trials": [t.to_dict() for t in self.trials],
            "error": None if self.error is None else {"problem": self.error.problem, "fix": self.error.fix},
        }


@checked
def smoke_check_sweep(spec: MLJobSpec, again: str | None = None, files: FileSet | None = None) -> SweepSmoke:
    """Check every trial's arguments and run the extreme trials' smoke steps (side by side); `again`: what the
    fix of a failure ends with (default: run `vdk run JOB` again). `files`: the job directory's files as the
    command found them already (every trial's working directory gets them; default: found once here)."""
    assert spec.sweep is not None
    again = again or f"run `vdk run {spec.job_dir}` again"
    files = files if files is not None else scan_job_dir(spec.job_dir)
    with tempfile.TemporaryDirectory(prefix=f"{spec.name}-sweep-") as folder:  # the trials' metric files
        return _smoke_check(spec, again, Path(folder), files)


def _smoke_check(spec: MLJobSpec, again: str, folder: Path, files: FileSet) -> SweepSmoke:
    sweep = spec.sweep
    assert sweep is not None  # as smoke_check_sweep asserted
    values = sweep.trial_values()
    extremes = sweep.extremes()
    lists = [list(spec.trial(v).arguments(smoke=True)) for v in values]
    outcomes: dict[int, Any] = {}
    starters = [HostStarter() for _ in extremes]

    def smoke(i: int, params: dict) -> None:
        # one step more than a plain smoke run: what the script shows after a step (its metric) is seen
        trial = dataclasses.replace(spec.trial(params), smoke_steps=spec.smoke_steps + 1)
        plan = smoke_plan(trial, files=files)
        metric_file = folder / f"metric-{i}.log"
        env = {**plan.env, wire.METRIC: sweep.metric, wire.METRIC_FILE: str(metric_file), wire.METRIC_SECONDS: "0"}
        plan = _with_env(plan, env)
        try:
            run = run_plan(plan, QUIET, starters[i], again, io.StringIO(), check_resume=False)
            outcomes[i] = (run, metric_file)
        except BaseException as e:  # noqa: BLE001 - reported with the others
            outcomes[i] = (e, metric_file)

    threads = [threading.Thread(target=smoke, args=(i, p), daemon=True) for i, p in enumerate(extremes)]
    for thread in threads:
        thread.start()
    try:
        arguments = check_arguments(spec.trial(values[0]), lists, dict(spec.trial(values[0]).env), files)
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C (a signal) reaches this thread only: the runs in the others are stopped first
        for starter in starters:
            starter.stop_running()
        for thread in threads:
            thread.join()
        raise
    return _result(spec, values, extremes, arguments, outcomes, again)


def _with_env(plan: Any, env: dict[str, str]) -> Any:
    return dataclasses.replace(plan, env=env)


def _result(spec, values, extremes, arguments: ArgumentsChecked, outcomes, again: str) -> SweepSmoke:
    sweep = spec.sweep
    by_index = {r["index"]: r for r in arguments.results}
    trials, runs, error, names = [], [], None, set()
    for i, params in enumerate(values):
        checked = by_index.get(i)
        verdict = None if checked is None else checked["accepted"]
        state = "not checked" if verdict is None else ("accepted" if verdict else "refused")
        smoke = metric = steps = None
        extreme = next((j for j, e in enumerate(extremes) if e == params), None)
        if extreme is not None and extreme in outcomes:
            run, metric_file = outcomes[extreme]
            if isinstance(run, BaseException):
                raise run
            runs.append(run)
            smoke = "passed" if run.passed else "failed"
            lines = metric_file.read_text(encoding="utf-8").splitlines() if metric_file.is_file() else []
            points = wire.read_metric_lines(lines)
            metric = points[-1][1] if points else None
            names |= set(read_names(lines) or [])
            steps = run.outcome.steps
            if error is None and not run.passed:
                error = run.error
        trials.append(CheckedTrial(params, state, (checked or {}).get("message", ""), smoke, metric, steps))
    refused = [t for t in trials if t.arguments == "refused"]
    if refused:
        first = refused[0]
        shown = ", ".join(f"{k}={wire.format_value(v)}" for k, v in first.params.items())
        error = LocalRunFailed(
            f"{len(refused)} of {len(trials)} trials would die at once: the script refuses the arguments of "
            f"the trial {shown}: {first.message}",
            f"fix the args of [ml-training] or the parameter's values in [ml-training.sweep] of {spec.config_path}, "
            f"then {again}",
        )
    elif (
        error is None
        and all(t.smoke == "passed" for t in trials if t.smoke)
        and not any(t.metric is not None for t in trials)
    ):
        seen = ", ".join(sorted(names)) or "no value at all"
        error = LocalRunFailed(
            f"the script never reported the sweep's metric {sweep.metric} in its smoke runs (it showed: {seen})",
            f"set `metric = NAME` in [ml-training.sweep] to one it reports, log it (HF Trainer, Lightning's "
            f"self.log) or print `{sweep.metric}=VALUE` (a smoke trial trains on past smoke_steps until the metric is "
            "first reported, up to smoke_timeout); "
            f"then {again}",
        )
    if arguments.status == argument_check.ERROR and error is None and not runs:
        error = LocalRunFailed(f"the arguments of the trials could not be checked: {arguments.why}", again)
    return SweepSmoke(spec, trials, arguments, runs, error, sorted(names))
