"""A sweep's search on Optuna, the engine: its study (sampler, pruner, direction) on a storage, a trial asked for
with the sweep's distributions, its metric lines reported as intermediate values (and the pruner asked), the
rule that stops a sweep whose first trials all failed, and the study as the table `vdk show` prints.

Shared by a trial pod (runtime/sweep_trial.py), the study's pod (runtime/sweep_server.py) and a local full run
of a sweep (ops/sweep_local.py). Optuna is imported when a function needs it: it is in the job image's dependency
layer when the job has a sweep, and in vdk's environment.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep
from vdk.plugin.ml_training.vocabulary import wire as words

# Trial attributes the sweep keeps in the study (user attributes).
SLOT = "vdk_slot"  # the trial pod's completion index that ran it (a restarted pod resumes its trial)
WHY = "vdk_why"  # why it failed
NAMES = "vdk_names"  # the names the script showed, when it never showed the metric
STOPPED = "vdk_stopped"  # study attribute: why the sweep stopped early

COMPLETE = "complete"
PRUNED = "pruned"
FAILED = "failed"
RUNNING = "running"
WAITING = "waiting"
FINISHED_STATES = (COMPLETE, PRUNED, FAILED)


def optuna() -> Any:
    try:
        import optuna as engine
    except ImportError as e:
        raise SystemExit(
            words.error(
                f"the sweep needs Optuna, which this environment lacks ({e}); a job with a sweep gets optuna and "
                "grpcio in its image's dependency layer: deploy it again with this vdk"
            )
        ) from None
    engine.logging.set_verbosity(engine.logging.WARNING)
    return engine


def distributions(sweep: Sweep) -> dict[str, Any]:
    """The sweep's parameters as Optuna distributions."""
    distribution = optuna().distributions
    out = {}
    for p in sweep.parameters:
        kind = p["kind"]
        if kind in (wire.LIST, wire.CHOICE):
            out[p["name"]] = distribution.CategoricalDistribution(list(p["values"]))
        elif kind == wire.INT:
            out[p["name"]] = distribution.IntDistribution(int(p["low"]), int(p["high"]))
        else:
            out[p["name"]] = distribution.FloatDistribution(p["low"], p["high"], log=kind == wire.LOGUNIFORM)
    return out


def sampler(sweep: Sweep) -> Any:
    samplers = optuna().samplers
    if sweep.algorithm == wire.GRID:
        grid_sampler: Any = samplers.GridSampler  # imported when a sweep runs: a base class mypy takes as Any

        class Grid(grid_sampler):
            """Optuna's grid, told trial by trial: its `after_trial` would call `study.stop()`, which only
            `study.optimize` allows; the sweep counts its trials itself."""

            def after_trial(self, study, trial, state, values):
                return None

        return Grid(sweep.grid(), seed=sweep.seed)
    if sweep.algorithm == wire.RANDOM:
        return samplers.RandomSampler(seed=sweep.seed)
    startup = max(1, min(10, sweep.trials // 4))
    return samplers.TPESampler(seed=sweep.seed, n_startup_trials=startup)


def pruner(sweep: Sweep) -> Any:
    pruners = optuna().pruners
    if not sweep.prune:
        return pruners.NopPruner()
    startup = max(1, min(5, sweep.trials // 5))  # from the second trial on for short sweeps
    base_pruner: Any = pruners.BasePruner  # imported when a sweep runs: a base class mypy takes as Any

    class MedianOfCurves(base_pruner):
        """Optuna's median rule, each finished trial read at the judged trial's step (`median_prunes`)."""

        def prune(self, study: Any, trial: Any) -> bool:
            return median_prunes(study, trial, startup)

    return MedianOfCurves()


def value_at(curve: dict[int, float], step: int) -> float | None:
    """A trial's intermediate values read at `step`: the value of the last step it reported at or before it (None
    before its first)."""
    reported = [s for s in curve if s <= step]
    return curve[max(reported)] if reported else None


def median_prunes(study: Any, trial: Any, startup: int) -> bool:
    """Whether `trial` is to stop: its best value so far is worse than the median of the completed trials (once
    `startup` of them completed) at its last step. A trial reports its metric once per period of wall clock
    (runtime/metrics.py), at whatever step it reached, so two trials seldom report the same steps: each completed
    trial is read at the step as `value_at` reads it, where Optuna's MedianPruner takes only a value reported at
    that very step and judges a trial only where its steps happen to meet another's (late or never, the more so
    on a loaded machine)."""
    engine = optuna()
    completed = study.get_trials(deepcopy=False, states=(engine.trial.TrialState.COMPLETE,))
    step = trial.last_step
    if step is None or len(completed) < startup:
        return False
    mine = [v for v in trial.intermediate_values.values() if math.isfinite(v)]
    theirs = [v for t in completed if (v := value_at(t.intermediate_values, step)) is not None and math.isfinite(v)]
    if not mine or not theirs:
        return False
    median = statistics.median(theirs)
    if study.direction == engine.study.StudyDirection.MAXIMIZE:
        return max(mine) < median
    return min(mine) > median


def open_study(sweep: Sweep, storage: Any) -> Any:
    """The sweep's study on `storage` (a URL or a storage object), created by the first to open it."""
    direction = "maximize" if sweep.goal == wire.MAX else "minimize"
    return optuna().create_study(
        study_name=sweep.study,
        storage=storage,
        sampler=sampler(sweep),
        pruner=pruner(sweep),
        direction=direction,
        load_if_exists=True,
    )


def ask(study: Any, sweep: Sweep, slot: int | None = None) -> Any:
    """A new trial with the sweep's distributions (its values chosen by the sampler), marked with its slot."""
    trial = study.ask(distributions(sweep))
    if slot is not None:
        trial.set_user_attr(SLOT, slot)
    return trial


def state_name(trial: Any) -> str:
    return {"COMPLETE": COMPLETE, "PRUNED": PRUNED, "FAIL": FAILED, "RUNNING": RUNNING}.get(trial.state.name, WAITING)


def stop_reason(study: Any, sweep: Sweep) -> str | None:
    """Why the sweep must stop: its first `stop_after_failures` trials all failed (or it was stopped already)."""
    stopped = study.user_attrs.get(STOPPED)
    if stopped:
        return str(stopped)
    first = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)[: sweep.stop_after_failures]
    if len(first) < sweep.stop_after_failures or any(state_name(t) != FAILED for t in first):
        return None
    whys = [t.user_attrs.get(WHY) or "no reason recorded" for t in first]
    common = (
        whys[0]
        if len(set(whys)) == 1
        else "; ".join(f"trial {t.number}: {w}" for t, w in zip(first, whys, strict=True))
    )
    return (
        f"the first {len(first)} trials all failed ({common}); the sweep stopped so that the rest do not fail "
        "the same way"
    )


class TrialReports:
    """The metric lines of one trial's rank 0, reported to Optuna as they come (a line is read again until the study
    took its report: none is lost while the study's pod restarts); `poll()` says whether the pruner asks to stop
    the trial. Not once its script has ended (rank 0's names line came): there is nothing left to
    save, and the trial is complete with its last value (values reported late, after the study was unreachable,
    would otherwise prune a trial that ran to its end)."""

    def __init__(self, trial: Any, path: Path, prune: bool):
        self.trial = trial
        self.path = Path(path)
        self.prune = prune
        self.points: list[tuple[int, float]] = []
        self.names: list[str] | None = None
        self._offset = 0
        self._reported: set[int] = set(getattr(trial, "intermediate_values", None) or ())

    def poll(self) -> bool:
        from vdk.plugin.ml_training.runtime.metrics import read_names

        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self._offset)
                text = f.read()
        except OSError:
            return False
        complete = text[: text.rfind("\n") + 1]
        lines = complete.splitlines()
        new = [(s, v) for s, v in wire.read_metric_lines(lines) if s not in self._reported]
        for step, value in new:  # a report the study does not take (it restarts) raises: its lines are read again
            self.trial.report(value, step)
            self._reported.add(step)
            self.points.append((step, value))
        self._offset += len(complete.encode("utf-8"))
        names = read_names(lines)
        if names is not None:
            self.names = names
        return bool(new) and self.prune and self.names is None and self.trial.should_prune()

    @property
    def last(self) -> tuple[int, float] | None:
        return self.points[-1] if self.points else None


# --- the study as a table ------------------------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment is not None else None


def snapshot(study: Any, sweep: Sweep, now: Callable[[], datetime] = datetime.now) -> dict:
    """The study as one JSON-able dict: every trial (number, state, params, metric, steps, times, slot, why),
    the best trial's number, and why the sweep stopped (None while it goes on)."""
    trials = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        state = state_name(t)
        steps = max(t.intermediate_values) if t.intermediate_values else None
        value = t.value if t.value is not None and math.isfinite(t.value) else None
        if value is None and t.intermediate_values:
            value = t.intermediate_values[steps]
        end = t.datetime_complete or (now() if state == RUNNING and t.datetime_start else None)
        duration = (end - t.datetime_start).total_seconds() if end and t.datetime_start else None
        trials.append(
            {
                "number": t.number,
                "state": state,
                "params": dict(t.params),
                "metric": value,
                "steps": steps,
                "started": _iso(t.datetime_start),
                "ended": _iso(t.datetime_complete),
                "seconds": None if duration is None else round(duration, 1),
                "slot": t.user_attrs.get(SLOT),
                "why": t.user_attrs.get(WHY),
            }
        )
    done = [t for t in trials if t["state"] == COMPLETE and t["metric"] is not None]
    best = None
    for t in done:
        if best is None or sweep.better(t["metric"], best["metric"]):
            best = t
    finished = sum(1 for t in trials if t["state"] in FINISHED_STATES)
    return {
        "metric": sweep.metric,
        "goal": sweep.goal,
        "trials_planned": sweep.trials,
        "trials": trials,
        "best": best["number"] if best else None,
        "stopped": study.user_attrs.get(STOPPED),
        "finished": finished >= sweep.trials or bool(study.user_attrs.get(STOPPED)),
    }


def pruned_savings_seconds(trials: list[dict]) -> float:
    """Seconds pruning saved: for each pruned trial, the median duration of the completed ones minus its own."""
    complete = [t["seconds"] for t in trials if t["state"] == COMPLETE and t.get("seconds")]
    if not complete:
        return 0.0
    typical = statistics.median(complete)
    return sum(max(0.0, typical - (t.get("seconds") or 0.0)) for t in trials if t["state"] == PRUNED)


def wait_for(call: Callable[[], Any], what: str, timeout: float, say: Callable[[str], None]) -> Any:
    """`call()` until it stops failing for want of the study's server (it may be starting or restarting)."""
    deadline = time.monotonic() + timeout
    delay, told = 0.5, 0.0
    while True:
        try:
            return call()
        except Exception as e:  # gRPC and connection errors of every kind; others go on
            if not _unreachable(e):
                raise
            if time.monotonic() >= deadline:
                raise SystemExit(
                    words.error(
                        f"{what}: the study did not answer for {timeout:.0f} s "
                        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                    )
                ) from None
            if time.monotonic() - told > 30:
                say(f"{words.PREFIX} waiting for the sweep's study ({what}): {type(e).__name__}")
                told = time.monotonic()
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _unreachable(error: BaseException) -> bool:
    """Whether `error` says the study's server could not be reached (it may be starting or restarting)."""
    kinds = [type(error), *type(error).__mro__]
    return isinstance(error, (ConnectionError, TimeoutError, OSError)) or any(
        k.__module__.startswith("grpc") or k.__name__ in ("OperationalError", "RpcError") for k in kinds
    )
