"""The run's series: what rank 0 already measures — the loss, the metrics the script shows, steps per second,
the learning rate, its node's GPU activity and memory — as points over the run, for the viewers ML engineers
already open: TensorBoard event files in the run's output directory (runtime/board_events.py) and, when
MLFLOW_TRACKING_URI is set, an MLflow run (runtime/mlflow_runs.py). The script changes nothing.

What it costs the training thread: a listener of the optimizer steps reads the clock (as the progress lines do)
and, once a period, keeps the step's loss tensors and learning rate — nothing is read from the device there; a
value the script shows (logged by a trainer, or printed) is kept in a list. Everything else — the loss read from
the device, the GPU figures, the writers — happens on a daemon thread once a period, and when the script ends
(the end waits FINAL_WAIT_SECONDS at most). Any error turns a writer off with one warning line: training goes on.

The run's facts (its name in vdk, job, team, image, commit, datasets, config) come in one variable, RUN_FACTS,
as JSON: `facts_environment` writes it (the local launcher, the pods' template), `read_facts` reads it.
Standard library only at import (torch is the caller's).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import Protocol

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.metrics import shown_number
from vdk.plugin.ml_training.vocabulary import wire

DEFAULT_SECONDS = 2.0  # between two points of a series (VDK_ML_TRAINING_SERIES_SECONDS; 0: no series)
FINAL_WAIT_SECONDS = 10.0  # how long the script's end waits for the writers' last points
THREAD_NAME = "vdk-series"
MAX_NAMES = 64  # metrics of different names a script shows: more are not followed (a printed table of numbers)
MAX_PENDING = 10_000  # shown values kept between two periods

# The series, by name (TensorBoard prefixes them with `vdk/`: runtime/board_events.py).
LOSS = "loss"
STEPS_PER_SECOND = "steps_per_second"
LEARNING_RATE = "learning_rate"
GPU_ACTIVITY = "gpu/sm_activity_percent"  # node 0's GPUs at the last sample (runtime/gpu_lines.py: source)
GPU_MEMORY = "gpu/memory_gib"  # the most any one GPU of node 0 held at the last sample
METRICS = "metrics/"  # + a name the script showed: `metrics/eval_loss`


def metric_series(name: str) -> str:
    """The series of a value the script showed under `name`."""
    return METRICS + name


@dataclass(frozen=True)
class Point:
    series: str
    value: float
    step: int
    wall: float  # Unix seconds


@dataclass(frozen=True)
class RunFacts:
    """What a viewer shows about the run beside its series: its name in vdk, the job, the team, the image, the
    commit, the datasets' versions, the config and, for a sweep's trial, its values and the sweep's metric."""

    run: str = ""
    job: str = ""
    team: str = ""
    image: str = ""  # reference by digest (cluster runs)
    commit: str = ""
    dirty: bool = False
    datasets: dict[str, str] = field(default_factory=dict)  # target -> pinned version
    config: dict[str, str] = field(default_factory=dict)  # [ml-training] keys as given, and the script's args
    params: dict[str, Any] = field(default_factory=dict)  # a sweep trial's values
    metric: str = ""  # a sweep trial's metric
    parent: str = ""  # a sweep trial's MLflow parent run (runtime/mlflow_runs.py)

    def to_json(self) -> str:
        data = {k: v for k, v in self.__dict__.items() if v not in ("", {}, False)}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def facts_environment(facts: RunFacts) -> dict[str, str]:
    """The variable that hands the run's facts to its training processes."""
    return {protocol.RUN_FACTS: facts.to_json()}


def trial_facts(env: Mapping[str, str], number: int) -> dict[str, str]:
    """The facts of a cluster sweep's trial `number`, from its sweep's: its own name (`RUN-trial-N`)."""
    text = env.get(protocol.RUN_FACTS)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    data["run"] = f"{data.get('run') or 'sweep'}-trial-{number}"
    return {protocol.RUN_FACTS: json.dumps(data, sort_keys=True, separators=(",", ":"))}


def read_facts(env: Mapping[str, str] | None = None) -> RunFacts:
    """The run's facts of the environment, with a sweep trial's values and metric (runtime/sweep_protocol.py); what
    does not parse is left out."""
    from vdk.plugin.ml_training.runtime import sweep_protocol

    env = os.environ if env is None else env
    try:
        data = json.loads(env.get(protocol.RUN_FACTS) or "{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    known = {k: v for k, v in data.items() if k in RunFacts.__dataclass_fields__}
    facts = RunFacts(**known)
    params = facts.params
    try:
        params = json.loads(env.get(sweep_protocol.TRIAL_PARAMS) or "null") or params
    except ValueError:
        pass
    metric = env.get(sweep_protocol.METRIC) or facts.metric
    parent = env.get(protocol.MLFLOW_PARENT) or facts.parent
    if not facts.run and env.get(protocol.RUN_DIR):  # a local run: its directory's name is its name
        facts = RunFacts(**{**facts.__dict__, "run": os.path.basename(env[protocol.RUN_DIR].rstrip("/"))})
    return RunFacts(**{**facts.__dict__, "params": dict(params), "metric": metric, "parent": parent})


class Writer(Protocol):
    """Where the points go. Called on the series' thread only; `close` within its own bound."""

    name: str  # for its warning line

    def write(self, points: list[Point]) -> None: ...

    def close(self, status: str) -> None: ...


@dataclass(frozen=True)
class SeriesSettings:
    period: float = DEFAULT_SECONDS
    problems: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SeriesSettings:
        env = os.environ if env is None else env
        text = (env.get(protocol.SERIES_SECONDS) or "").strip()
        if not text:
            return cls()
        try:
            period = float(text)
            if not (period >= 0 and math.isfinite(period)):
                raise ValueError
        except ValueError:
            return cls(problems=(f"{protocol.SERIES_SECONDS}={text!r} is not a number of seconds >= 0",))
        return cls(period)


class SeriesRecorder:
    """Collects rank 0's series and hands them to `writers` from a daemon thread, once a `period`.

    `attach(counter)`: the StepCounter (runtime/steps.py); `record(name, value)`: a value the script showed
    (runtime/metrics.py's sources); `gpus()`: node 0's GPU figures now (runtime/gpu_sampler.py), or None."""

    def __init__(
        self,
        writers: list[Writer],
        period: float = DEFAULT_SECONDS,
        gpus: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        err: Any = None,
    ):
        self.writers = list(writers)
        self.period = period
        self.gpus = gpus
        self.counter: Any = None
        self._clock = clock
        self._wall = wall
        self._err = err
        self._due = 0.0  # the first step is kept at once
        self._cond = threading.Condition()
        # the steps kept (one a period; more than one only while the series' thread is late): steps, loss, lr,
        # clock, wall. A list, so that a step kept while the thread is starved is never replaced by the next
        self._steps: list[tuple[int, Any, float | None, float | None, float]] = []
        self._kept = threading.Lock()  # the training thread appends, the series' thread takes
        self._end: tuple[int, Any, float | None, float | None, float] | None = None  # the same, at the script's end
        self._last: tuple[float, Any] | None = None  # (clock, weakref to its optimizer) of the last step
        self._shown: list[tuple[str, float, int, float]] = []
        self._names: set[str] = set()
        self._rate_from: tuple[float, int] | None = None  # (clock, steps) of the last rate's end
        self._thread: threading.Thread | None = None
        self._closed = False
        self._on = True

    # --- the training thread's side -------------------------------------------------------------------------

    def attach(self, counter: Any) -> SeriesRecorder:
        if self._on and self.counter is None:
            self.counter = counter
            counter.listeners.append(self._after_step)
            if hasattr(os, "register_at_fork"):  # a forked child (DataLoader worker) records nothing
                os.register_at_fork(after_in_child=self._forget)
        return self

    def _after_step(self, counter: Any, optimizer: Any) -> None:
        now = self._clock()
        self._last = (now, optimizer)
        if now < self._due:
            return
        self._due = now + self.period
        try:
            kept = (counter.steps, counter.loss_snapshot(), _learning_rate(optimizer), now, self._wall())
            with self._kept:
                if len(self._steps) >= MAX_PENDING:
                    self._steps.pop()  # the thread has not run for MAX_PENDING periods: the latest step instead
                self._steps.append(kept)
            self._wake()
        except Exception as e:  # noqa: BLE001 - the series must never break training
            self.fail(e)

    def record(self, name: str, value: Any) -> None:
        """A value the script showed (a trainer's log, Lightning's metrics, a printed `name=value`)."""
        if not self._on:
            return
        number = shown_number(value)
        if number is None or not math.isfinite(number) or len(self._shown) >= MAX_PENDING:
            return
        if name not in self._names:
            if len(self._names) >= MAX_NAMES:
                return
            self._names.add(name)
        steps = self.counter.steps if self.counter is not None else 0
        with self._kept:
            self._shown.append((name, number, steps, self._wall()))
        self._wake()

    def fail(self, error: Exception) -> None:
        """A source of values failed (runtime/metrics.py): the others go on."""

    def _wake(self) -> None:
        if self._thread is None:
            with self._cond:
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                    self._thread.start()

    def _forget(self) -> None:
        self._on = False
        self.writers = []
        try:
            self.counter.listeners.remove(self._after_step)
        except (AttributeError, ValueError):
            pass

    # --- the series' thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closed:
                    self._cond.wait(self.period)
                closed = self._closed
            self._flush()
            if closed:
                return

    def _flush(self) -> None:
        points = self.take()
        if not points:
            return
        for writer in list(self.writers):
            try:
                writer.write(points)
            except Exception as e:  # noqa: BLE001 - one writer off, the others and training go on
                self._drop(writer, e)

    def take(self) -> list[Point]:
        """The points since the last call: the kept step's loss (read now), rate and learning rate, the values
        shown, node 0's GPU figures."""
        points: list[Point] = []
        with self._kept:
            steps_kept, self._steps = self._steps, []
            shown, self._shown = self._shown, []
        end, self._end = self._end, None
        if end is not None and not (steps_kept and steps_kept[-1][0] == end[0]):
            steps_kept.append(end)  # the steps kept but not yet taken when the script ended, then the end's
        for kept in steps_kept:
            steps, loss, lr, at, wall = kept
            value = _loss_value(loss)
            if value is not None:
                points.append(Point(LOSS, value, steps, wall))
            if lr is not None:
                points.append(Point(LEARNING_RATE, lr, steps, wall))
            if at is not None:  # the clock of the step (at the script's end, of its last step; None: none)
                if self._rate_from is not None and at > self._rate_from[0] and steps > self._rate_from[1]:
                    rate = (steps - self._rate_from[1]) / (at - self._rate_from[0])
                    points.append(Point(STEPS_PER_SECOND, rate, steps, wall))
                self._rate_from = (at, steps)
        points += [Point(metric_series(name), value, steps, wall) for name, value, steps, wall in shown]
        points += self._gpu_points()
        return points

    def _gpu_points(self) -> list[Point]:
        if self.gpus is None:
            return []
        try:
            figures = self.gpus()
        except Exception:  # noqa: BLE001 - the series without the GPUs
            return []
        if figures is None:
            return []
        steps = self.counter.steps if self.counter is not None else 0
        out = []
        wall = self._wall()
        if figures.sm_now is not None:
            out.append(Point(GPU_ACTIVITY, float(figures.sm_now), steps, wall))
        if figures.mem_now:
            out.append(Point(GPU_MEMORY, figures.mem_now / (1 << 30), steps, wall))
        return out

    def finish(self, status: str, wait: float = FINAL_WAIT_SECONDS) -> None:
        """The script ended (`status`: finished or failed): the last points, then each writer closed. Waits at
        most `wait` seconds; never raises."""
        if not self._on:
            return
        self._on = False
        try:
            if self.counter is not None:
                self.counter.listeners.remove(self._after_step)
                # the last step's learning rate and clock (the time after it, evaluation or saving, is no step)
                at, optimizer = self._last if self._last is not None else (None, None)
                lr = _learning_rate(optimizer) if optimizer is not None else None
                self._end = (self.counter.steps, self.counter.loss_snapshot(), lr, at, self._wall())
        except Exception:  # noqa: BLE001 - the series end without the last step's point
            pass
        done = threading.Event()

        def last() -> None:
            try:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                    thread = self._thread
                if thread is not None and thread is not threading.current_thread():
                    thread.join()
                else:
                    self._flush()
                for writer in list(self.writers):
                    try:
                        writer.close(status)
                    except Exception as e:  # noqa: BLE001 - one writer's end, the others' go on
                        self._drop(writer, e)
            finally:
                done.set()

        closer = threading.Thread(target=last, name=f"{THREAD_NAME}-end", daemon=True)
        closer.start()
        if not done.wait(wait):
            self._say(f"the run's series were not all written within {wait:g} s of the script's end")

    def stand_down(self) -> None:
        """Another process reports the steps (mp.spawn's worker 0): this one writes nothing."""
        self._forget()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _drop(self, writer: Writer, error: Exception) -> None:
        try:
            self.writers.remove(writer)
        except ValueError:
            return
        self._say(f"{writer.name} is off for the rest of this run after an error ({type(error).__name__}: {error}); "
                  "training goes on")  # fmt: skip

    def _say(self, text: str) -> None:
        try:
            err = self._err or sys.stderr
            err.write(wire.warning(text) + "\n")
            err.flush()
        except Exception:  # noqa: BLE001 - stderr is gone: nothing left to tell
            pass


def _learning_rate(optimizer: Any) -> float | None:
    """The learning rate of the optimizer's first parameter group (a float; a tensor's value is not read)."""
    try:
        value = optimizer.param_groups[0]["lr"]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _loss_value(loss: Any) -> float | None:
    from vdk.plugin.ml_training.runtime.steps import loss_value

    value = loss_value(loss)
    return value if value is not None and math.isfinite(value) else None


_current: SeriesRecorder | None = None


def start(
    writers: list[Writer], gpus: Callable[[], Any] | None = None, env: Mapping[str, str] | None = None, err: Any = None
) -> SeriesRecorder | None:
    """Rank 0's series, handed to `writers` (runtime/rank_process.py makes them: event files where the run has an
    output directory, an MLflow run where MLFLOW_TRACKING_URI says), unless the period is 0 or no writer applies;
    None then."""
    global _current
    settings = SeriesSettings.from_env(env)
    for problem in settings.problems:
        sys.stderr.write(wire.warning(f"{problem}: ignored") + "\n")
    if not settings.period or not writers:
        return None
    _current = SeriesRecorder(writers, settings.period, gpus, err=err)
    return _current


def stand_down_current() -> None:
    """Before mp.spawn's workers start: worker 0 records the series in this process's place."""
    if _current is not None:
        _current.stand_down()
