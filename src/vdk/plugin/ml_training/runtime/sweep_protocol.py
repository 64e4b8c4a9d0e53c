"""What the parts of a hyperparameter sweep tell each other, each format written and read here: the sweep as
JSON (the spec's `to_wire()` -> the study and its trials), `${name}` references and their substitution (the
spec checks them, a trial's process gets its values), the metric lines a training process leaves for its
trial (`metric step=12 value=0.53`), and the study lines the study's pod prints (one JSON line per change:
`vdk show` reads the last).

Standard library only: training processes, trial pods and the plugin import it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.runtime.protocol import PROGRESS_SECONDS
from vdk.plugin.ml_training.vocabulary import wire as words

# Environment of a trial's training processes (rank 0 reads them: runtime/metrics.py).
METRIC = "VDK_ML_TRAINING_SWEEP_METRIC"  # the name of the metric to report
METRIC_FILE = "VDK_ML_TRAINING_SWEEP_METRIC_FILE"  # where rank 0 appends its metric lines
METRIC_SECONDS = "VDK_ML_TRAINING_SWEEP_METRIC_SECONDS"  # at most one line per this many seconds (0: every value)
DEFAULT_METRIC_SECONDS = 10.0
# Environment of a trial pod (k8s/sweep_manifests.py -> runtime/sweep_trial.py).
SPEC = "VDK_ML_TRAINING_SWEEP"  # the sweep as JSON
STUDY_ADDRESS = "VDK_ML_TRAINING_SWEEP_STUDY"  # host:port of the study's storage proxy
STUDY_STORAGE = "VDK_ML_TRAINING_SWEEP_STORAGE"  # or a storage URL (local full runs, tests)
TRIAL_SECONDS = "VDK_ML_TRAINING_SWEEP_TRIAL_SECONDS"  # a trial that runs longer fails (max_runtime)
TRIAL_PARAMS = "VDK_ML_TRAINING_SWEEP_PARAMS"  # a trial's parameters as JSON (set for its processes)

# `${name}` in args and [ml-training.env] values: a parameter of the sweep.
REFERENCE = re.compile(r"\$\{([^{}$]*)\}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Parameter kinds, as config.ini writes them (a plain list is LIST).
LIST = "list"
CHOICE = "choice"
UNIFORM = "uniform"
LOGUNIFORM = "loguniform"
INT = "int"
DISTRIBUTIONS = (CHOICE, UNIFORM, LOGUNIFORM, INT)  # written as `name(...)`
GRID = "grid"
RANDOM = "random"
TPE = "tpe"
ALGORITHMS = (GRID, RANDOM, TPE)
MIN = "min"
MAX = "max"

METRIC_MARK = words.mark(words.METRIC)
STUDY_MARK = words.mark(words.STUDY)
STOP_MARK = words.mark(words.SWEEP_STOPPED)
# What a trial pod exits with when the first trials all failed: the trials' Job fails at once (its
# podFailurePolicy, k8s/sweep_manifests.py).
STOP_EXIT_CODE = 3


def references(text: str) -> list[str]:
    """The names `${name}` in `text` refers to, in order (as written: the caller checks them)."""
    return [match.group(1) for match in REFERENCE.finditer(text)]


def format_value(value: Any) -> str:
    """A parameter's value as a command line or an environment variable holds it: 32, 0.0003, adamw."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value) if not value.is_integer() or abs(value) >= 1e16 else repr(value)
    return str(value)


def substitute(text: str, params: Mapping[str, Any]) -> str:
    """`text` with every `${name}` of `params` replaced by its value (others stay as written)."""

    def one(match: re.Match) -> str:
        name = match.group(1)
        return format_value(params[name]) if name in params else match.group(0)

    return REFERENCE.sub(one, text)


# --- the sweep, as JSON ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    """The sweep as its study and trials read it (the spec's `to_wire()`)."""

    parameters: tuple[dict, ...]  # {"name", "kind", "values" | "low", "high"}
    trials: int
    parallel: int
    metric: str
    goal: str
    algorithm: str
    prune: bool
    stop_after_failures: int
    seed: int | None = None
    study: str = "sweep"

    def to_json(self) -> str:
        return json.dumps(self.__dict__ | {"parameters": list(self.parameters)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Sweep:
        data = json.loads(text)
        data["parameters"] = tuple(data["parameters"])
        return cls(**data)

    @property
    def names(self) -> list[str]:
        return [p["name"] for p in self.parameters]

    def grid(self) -> dict[str, list] | None:
        """Every parameter's values when all have a finite set (lists, choices, integer ranges), else None."""
        out = {}
        for p in self.parameters:
            values = parameter_values(p)
            if values is None:
                return None
            out[p["name"]] = values
        return out

    def better(self, a: float, b: float) -> bool:
        """Whether metric value `a` is better than `b`."""
        return a > b if self.goal == MAX else a < b


def parameter_values(parameter: dict) -> list | None:
    """The finite values of a parameter (None for a continuous one)."""
    kind = parameter["kind"]
    if kind in (LIST, CHOICE):
        return list(parameter["values"])
    if kind == INT:
        return list(range(int(parameter["low"]), int(parameter["high"]) + 1))
    return None


def grid_size(parameters: Iterable[dict]) -> int | None:
    size = 1
    for p in parameters:
        values = parameter_values(p)
        if values is None:
            return None
        size *= len(values)
    return size


# --- metric lines: a training process -> its trial --------------------------------------------------------


def metric_line(step: int, value: float) -> str:
    return f"{METRIC_MARK} step={step} value={value!r}"


def read_metric_lines(lines: Iterable[str]) -> list[tuple[int, float]]:
    """(step, value) of every metric line, in order; finite values only."""
    out = []
    for line in lines:
        fields = words.fields(line, words.METRIC)
        if fields is None:
            continue
        try:
            step, value = int(fields["step"]), float(fields["value"])
        except (KeyError, ValueError):
            continue
        if math.isfinite(value):
            out.append((step, value))
    return out


def metric_environment(env: Mapping[str, str], metric: str, metric_file: str, params: Mapping[str, Any]) -> dict:
    """What a trial's training processes are told of its metric, beside their environment `env`: the metric's name,
    the file rank 0 appends its lines to, the trial's values (JSON), and how often to report (every progress
    period, when the job sets one), unless `env` says."""
    out = {METRIC: metric, METRIC_FILE: metric_file, TRIAL_PARAMS: json.dumps(dict(params), sort_keys=True)}
    if METRIC_SECONDS not in env:
        period = (env.get(PROGRESS_SECONDS) or "").strip()
        out[METRIC_SECONDS] = period if period and period != "0" else str(DEFAULT_METRIC_SECONDS)
    return out


# --- study lines: the study's pod -> vdk show ------------------------------------------------------------


def study_line(snapshot: dict) -> str:
    """One line with the whole study: {"trials": [...], "stopped": why or None, "finished": bool}."""
    return f"{STUDY_MARK} {json.dumps(snapshot, sort_keys=True, separators=(',', ':'))}"


def stop_line(reason: str) -> str:
    """Why a sweep stopped early, as its trial pods and its study's pod say it."""
    return f"{STOP_MARK}: {reason}"


def read_study_lines(lines: Iterable[str]) -> dict | None:
    """The last study line's snapshot, or None."""
    for line in reversed(list(lines)):
        at = line.find(STUDY_MARK)
        if at < 0:
            continue
        try:
            return json.loads(line[at + len(STUDY_MARK) :].strip())
        except ValueError:
            continue
    return None
