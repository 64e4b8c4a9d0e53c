"""A hyperparameter sweep: the `[ml-training.sweep]` section of config.ini, read and checked into a `SweepSpec`,
and the spec of one trial (its parameters substituted for `${name}` in `args`, `smoke_args` and
`[ml-training.env]` values).

    [ml-training]
    args = --lr ${lr} --batch-size ${batch_size} --epochs 3

    [ml-training.sweep]
    lr = loguniform(1e-5, 1e-2)
    batch_size = 16, 32, 64
    trials = 24
    parallel = 6
    metric = eval_loss

The settings of the sweep are the keys of `SWEEP_KEYS` (their own catalogue, documented by key_table.py); every
other key is a parameter (sweep_grammar.py). Every bad sweep is one JobConfigError before any work: an unknown
distribution, `${x}` with no parameter `x`, a parameter nothing references, a bad bound, a grid larger than
`trials`, `parallel` above `trials`, ... (a metric the script never reports is the smoke check's to find).
"""

from __future__ import annotations

import configparser
import dataclasses
import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.config_file import ENV_SECTION
from vdk.plugin.ml_training.job.config_file import SECTION
from vdk.plugin.ml_training.job.config_file import SWEEP_SECTION
from vdk.plugin.ml_training.job.config_file import closest
from vdk.plugin.ml_training.job.config_file import inline_comment
from vdk.plugin.ml_training.job.keys import CHOICE
from vdk.plugin.ml_training.job.keys import INTEGER
from vdk.plugin.ml_training.job.keys import KEYS
from vdk.plugin.ml_training.job.keys import RUN_AND_DEPLOY
from vdk.plugin.ml_training.job.keys import TEXT
from vdk.plugin.ml_training.job.keys import Key
from vdk.plugin.ml_training.job.sweep_grammar import GrammarError
from vdk.plugin.ml_training.job.sweep_grammar import Parameter
from vdk.plugin.ml_training.job.sweep_grammar import misplaced_key
from vdk.plugin.ml_training.job.sweep_grammar import parse_parameter
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime.sweep_protocol import ALGORITHMS
from vdk.plugin.ml_training.runtime.sweep_protocol import GRID
from vdk.plugin.ml_training.runtime.sweep_protocol import MAX
from vdk.plugin.ml_training.runtime.sweep_protocol import MIN
from vdk.plugin.ml_training.runtime.sweep_protocol import NAME
from vdk.plugin.ml_training.runtime.sweep_protocol import TPE
from vdk.plugin.ml_training.runtime.sweep_protocol import references
from vdk.plugin.ml_training.runtime.sweep_protocol import substitute
from vdk.plugin.ml_training.vocabulary.human_units import size_text

DEFAULT_STOP_AFTER_FAILURES = 3
# The most trials a sweep runs, and why: `vdk run` checks every trial's arguments (a forked process each, some
# milliseconds: 10,000 take minutes on a laptop), and the study's pod prints its whole table, a line holding every
# trial, which `vdk show` reads from its log (10,000 trials: a few megabytes). Kubernetes would carry more (an
# Indexed Job of up to 100,000 completions), neither of those would.
MAX_TRIALS = 10_000
TRIALS_LIMIT_REASON = (
    f"a sweep runs at most {MAX_TRIALS} trials: `vdk run` checks every trial's arguments (a process each) and "
    "the study's pod prints its table of every trial in one log line, which `vdk show` reads"
)
MAX_SEED = 2**32 - 1
# The sweep as JSON is one environment variable of its pods (k8s/sweep_manifests.py): Linux refuses to start a
# process with a variable above 128 KiB (MAX_ARG_STRLEN), so a sweep whose lists would make it larger is refused.
MAX_SPEC_BYTES = 64 * 1024  # Optuna's samplers seed numpy, which takes seeds below 2**32
_GOALS = {"min": MIN, "minimize": MIN, "minimise": MIN, "max": MAX, "maximize": MAX, "maximise": MAX}
_PRUNE = {"median": True, "on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def _sweep_keys() -> tuple[Key, ...]:
    """The settings of [ml-training.sweep] (any other key is a parameter), in the order the docs list them."""
    return (
        Key(
            "trials",
            INTEGER,
            "how many trials the sweep runs",
            "24",
            default_text="the grid's size when every parameter is a list; else required",
        ),
        Key(
            "parallel",
            INTEGER,
            "trials at a time on the cluster (each a single-node run of the job's layout)",
            "6",
            default=1,
        ),
        Key(
            "metric",
            TEXT,
            "what the trials are compared by: a value the script logs through the HF Trainer or Lightning "
            "(`eval_loss`), `loss` (the training loss), or a `name=value` / `name: value` line it prints",
            "eval_loss",
            default_text="required",
        ),
        Key("goal", CHOICE, "`min` (a loss) or `max` (an accuracy)", "max", default=MIN, choices=lambda: (MIN, MAX)),
        Key(
            "algorithm",
            CHOICE,
            "how Optuna picks the next trial's values",
            "random",
            default_text="`grid` when every parameter is a list, else `tpe`",
            choices=lambda: ALGORITHMS,
        ),
        Key(
            "prune",
            CHOICE,
            "`median`: Optuna's median rule stops a trial whose metric is worse than the median of the "
            "completed trials at the same step (each one's last value at or before it); `off`: every trial runs to "
            "its end",
            "off",
            default="median",
            choices=lambda: ("median", "off"),
        ),
        Key(
            "stop_after_failures",
            INTEGER,
            "the sweep stops, saying why, when its first this-many trials all failed",
            "3",
            default=DEFAULT_STOP_AFTER_FAILURES,
        ),
        Key(
            "seed",
            INTEGER,
            "the sampler's seed, for a sweep that picks the same values again",
            "7",
            default_text="none (a new search each time)",
        ),
    )


SWEEP_KEYS: tuple[Key, ...] = tuple(dataclasses.replace(k, verbs=RUN_AND_DEPLOY) for k in _sweep_keys())
_SETTINGS = {key.name: key for key in SWEEP_KEYS}


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: its parameters and settings."""

    parameters: tuple[Parameter, ...]
    trials: int
    parallel: int
    metric: str
    goal: str
    algorithm: str
    prune: bool
    stop_after_failures: int
    seed: int | None = None

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def grid_size(self) -> int | None:
        return wire.grid_size(p.to_wire() for p in self.parameters)

    def to_wire(self, study: str = "sweep") -> wire.Sweep:
        """The sweep as its study and trials read it (runtime/sweep_protocol.py)."""
        return wire.Sweep(
            parameters=tuple(p.to_wire() for p in self.parameters),
            trials=self.trials,
            parallel=self.parallel,
            metric=self.metric,
            goal=self.goal,
            algorithm=self.algorithm,
            prune=self.prune,
            stop_after_failures=self.stop_after_failures,
            seed=self.seed,
            study=study,
        )

    def extremes(self) -> list[dict[str, Any]]:
        """The two trials at the extremes: every parameter at its smallest, every one at its largest (largest
        batch, most layers, highest rate, ...), as the smoke check runs them."""
        low = {p.name: p.extremes()[0] for p in self.parameters}
        high = {p.name: p.extremes()[1] for p in self.parameters}
        return [low] if low == high else [low, high]

    def trial_values(self) -> list[dict[str, Any]]:
        """The values of every trial as the smoke check checks their arguments: the grid's combinations (all of
        them), else `trials` sets drawn over the ranges (seeded), the extremes first."""
        grid = [p.grid_values() for p in self.parameters]
        finite = [values for values in grid if values is not None]
        if self.algorithm == GRID and len(finite) == len(grid):
            combos = itertools.islice(itertools.product(*finite), self.trials)
            return [dict(zip(self.names, combo, strict=True)) for combo in combos]
        rng = random.Random(self.seed if self.seed is not None else 0)
        out = self.extremes()
        while len(out) < self.trials:
            out.append({p.name: _draw(p, rng) for p in self.parameters})
        return out[: self.trials]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["parameters"] = {p.name: p.describe() for p in self.parameters}
        return data


def _draw(parameter: Parameter, rng: random.Random) -> Any:
    if parameter.kind in (wire.LIST, wire.CHOICE):
        return rng.choice(parameter.values)
    if parameter.kind == wire.INT:
        # a range has both bounds (the grammar refuses one without): not None here
        return rng.randint(int(parameter.low), int(parameter.high))  # type: ignore[arg-type]
    low, high = float(parameter.low), float(parameter.high)  # type: ignore[arg-type]  # a range: both bounds
    if parameter.kind == wire.LOGUNIFORM:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def read_sweep(
    parser: configparser.ConfigParser,
    path: Path,
    args: tuple[str, ...],
    smoke_args: tuple[str, ...] | None,
    env: tuple[tuple[str, str], ...],
) -> SweepSpec | None:
    """[ml-training.sweep] of a read config.ini, checked against the `${name}` references of `args`, `smoke_args`
    and the [ml-training.env] values `env`; None when the job has no sweep."""
    if not parser.has_section(SWEEP_SECTION):
        return None
    raw = dict(parser.items(SWEEP_SECTION))
    settings: dict[str, str] = {}
    parameters: list[Parameter] = []
    texts = [" ".join(args), " ".join(smoke_args or ()), *(value for _, value in env)]
    referenced = {name for text in texts for name in references(text)}  # where parameters are used
    for key, value in raw.items():
        name = key.strip()
        start = inline_comment(value)
        if start is not None:
            raise _error(
                path,
                name,
                f"{value[start:].strip()!r} looks like a comment, but config.ini has no inline "
                f"comments: the value would be {value.strip()!r}",
                f"write `{name} = {value[:start].rstrip()}` and put the comment on a line of its own",
            )
        if not value.strip():
            raise _error(path, name, "the value is empty", "give it a value, or remove the line")
        if name.lower() in _SETTINGS:
            settings[name.lower()] = value.strip()
            continue
        if name not in referenced and (typo := misplaced_key(name, value, list(_SETTINGS), KEYS)) is not None:
            raise _error(path, name, typo.problem, typo.fix)  # `metrc = val_loss`: a setting misspelt, no parameter
        if not NAME.fullmatch(name):
            raise _error(
                path,
                name,
                f"{name!r} is not a parameter name (letters, digits and _, not first a digit)",
                "name it like `lr` or `batch_size`, and write `${name}` where its value goes",
            )
        try:
            parameters.append(parse_parameter(name, value))
        except GrammarError as e:
            raise _error(path, name, e.problem, e.fix) from None
    if not parameters:
        raise JobConfigError(
            path,
            "the sweep has no parameters",
            "add one, e.g. `lr = loguniform(1e-5, 1e-2)`, and write `${lr}` in args",
            SWEEP_SECTION,
        )
    _check_references(path, parameters, args, smoke_args, env)
    return _settings(path, settings, tuple(parameters))


def _settings(path: Path, settings: dict[str, str], parameters: tuple[Parameter, ...]) -> SweepSpec:
    metric = settings.get("metric")
    if metric is None:
        raise _error(
            path,
            "metric",
            "the sweep has no metric to compare its trials by",
            "add `metric = eval_loss` (a value the script logs or prints), or `metric = loss` for the training loss",
        )
    if not all(part and NAME.fullmatch(part.replace("-", "_")) for part in metric.split("/")):
        raise _error(
            path,
            "metric",
            f"{metric!r} is not a metric name",
            "write the name the script logs, such as `eval_loss` or `val/acc`",
        )
    goal = _GOALS.get(settings.get("goal", MIN).lower())
    if goal is None:
        raise _error(
            path,
            "goal",
            f"{settings['goal']!r} is neither min nor max",
            "write `goal = min` for a loss, `goal = max` for an accuracy",
        )
    prune = _PRUNE.get(settings.get("prune", "median").lower())
    if prune is None:
        raise _error(
            path,
            "prune",
            f"{settings['prune']!r} is not a pruner",
            "write `prune = median` (the default) or `prune = off`",
        )
    grid = wire.grid_size(p.to_wire() for p in parameters)
    all_lists = all(p.kind == wire.LIST for p in parameters)
    algorithm = settings.get("algorithm", GRID if all_lists else TPE).lower()
    if algorithm not in ALGORITHMS:
        close = closest(algorithm, list(ALGORITHMS))
        raise _error(
            path,
            "algorithm",
            f"{algorithm!r} is not one of {', '.join(ALGORITHMS)}",
            (f"did you mean `{close}`? " if close else "") + f"use one of {', '.join(ALGORITHMS)}",
        )
    if algorithm == GRID and grid is None:
        continuous = next(p for p in parameters if p.continuous)
        raise _error(
            path,
            "algorithm",
            f"a grid needs a finite set of values, and {continuous.name} is {continuous.describe()}",
            "list its values instead (`0.1, 0.2, 0.3`), or use `algorithm = tpe` or `random`",
        )
    trials = _integer(path, settings, "trials", None)
    if trials is None:
        if algorithm != GRID or grid is None:
            raise _error(
                path, "trials", "the sweep does not say how many trials to run", "add `trials = 20` (or another number)"
            )
        if grid > MAX_TRIALS:
            raise _error(
                path,
                "trials",
                f"the grid has {grid} combinations of values, one trial each, and {TRIALS_LIMIT_REASON}",
                f"list fewer values, or sample the grid: `algorithm = random` (or tpe) with `trials = {MAX_TRIALS}` or "
                "fewer",
            )
        trials = grid
    if algorithm == GRID and grid is not None and grid > trials:
        fix = f"set `trials = {grid}`, list fewer values, " if grid <= MAX_TRIALS else "list fewer values, "
        raise _error(
            path,
            "trials",
            f"the grid has {grid} combinations of values, more than trials = {trials} allows",
            fix + f"or use `algorithm = random` to try {trials} of them",
        )
    parallel = _integer(path, settings, "parallel", 1)
    if parallel > trials:
        raise _error(
            path,
            "parallel",
            f"parallel = {parallel} is more than trials = {trials}: the extra slots would never run a trial",
            f"set `parallel = {trials}` or less, or raise trials",
        )
    spec = SweepSpec(
        parameters=parameters,
        trials=trials,
        parallel=parallel,
        metric=metric,
        goal=goal,
        algorithm=algorithm,
        prune=prune,
        stop_after_failures=_integer(
            path, settings, "stop_after_failures", DEFAULT_STOP_AFTER_FAILURES, maximum=MAX_TRIALS
        ),
        seed=_integer(path, settings, "seed", None, minimum=0, maximum=MAX_SEED),
    )
    size = len(spec.to_wire(study="s" * 63).to_json().encode())
    if size > MAX_SPEC_BYTES:
        largest = max(parameters, key=lambda p: len(p.describe()))
        raise _error(
            path,
            largest.name,
            f"the sweep's parameters take {size_text(size)} as its pods receive them (one environment variable, the "
            f"sweep as JSON), more than the {size_text(MAX_SPEC_BYTES)} a pod's variable may hold (Linux refuses "
            f"to start a process with a variable of {size_text(128 * 1024)}); the longest is "
            f"{largest.name}, {size_text(len(largest.describe()))}",
            "list fewer values (a range such as `int(1, 5000)` or `loguniform(...)` takes a few bytes), or shorter "
            "ones",
        )
    return spec


def _integer(
    path: Path, settings: dict[str, str], key: str, default: int | None, minimum: int = 1, maximum: int = MAX_TRIALS
) -> Any:
    """A whole-number setting: what is not one is said so; one out of range is said with the reason of the limit."""
    text = settings.get(key)
    if text is None:
        return default
    written = text.replace("_", "")
    if not written.isascii() or not written.isdigit():
        raise _error(
            path,
            key,
            f"{text!r} is not a whole number of at least {minimum}",
            f"write `{key} = {_SETTINGS[key].example}`",
        )
    value = int(written)
    if value < minimum:
        raise _error(path, key, f"{key} = {value} is below {minimum}", f"write `{key} = {_SETTINGS[key].example}`")
    if value > maximum:
        raise _error(path, key, f"{key} = {value} is above {maximum}: {_limit_reason(key, maximum)}", _limit_fix(key))
    return value


def _limit_reason(key: str, maximum: int) -> str:
    if key == "seed":
        return "Optuna's samplers seed numpy, which takes seeds below 2**32"
    return TRIALS_LIMIT_REASON


def _limit_fix(key: str) -> str:
    if key == "seed":
        return "use a smaller seed, such as `seed = 7`"
    if key == "trials":
        return (
            f"run {MAX_TRIALS} trials or fewer: a sampler that learns (`algorithm = tpe`) finds good values in far "
            "fewer; split a larger search into sweeps of their own"
        )
    return f"write `{key} = {_SETTINGS[key].example}`"


def _check_references(
    path: Path,
    parameters: list[Parameter],
    args: tuple[str, ...],
    smoke_args: tuple[str, ...] | None,
    env: tuple[tuple[str, str], ...],
) -> None:
    names = [p.name for p in parameters]
    places = [(SECTION, "args", " ".join(args)), (SECTION, "smoke_args", " ".join(smoke_args or ()))]
    places += [(ENV_SECTION, name, value) for name, value in env]
    used: set[str] = set()
    for section, key, text in places:
        for name in references(text):
            if name not in names:
                close = closest(name, names)
                hint = f"did you mean `${{{close}}}`? " if close else ""
                raise JobConfigError(
                    path,
                    f"${{{name}}} names no parameter of [{SWEEP_SECTION}] (it has {', '.join(names)})",
                    f"{hint}add `{name} = ...` to [{SWEEP_SECTION}], or fix the reference",
                    section,
                    key,
                )
            used.add(name)
    for name in names:
        if name not in used:
            raise _error(
                path,
                name,
                f"no value references the parameter {name}, so every trial would run the same",
                f"write `${{{name}}}` where its value goes: in args (`--{name.replace('_', '-')} "
                f"${{{name}}}`) or in an [{ENV_SECTION}] value",
            )


def _error(path: Path, key: str, problem: str, fix: str) -> JobConfigError:
    return JobConfigError(path, problem, fix, SWEEP_SECTION, key)


# --- a trial ------------------------------------------------------------------------------------------------


def trial_values(args: tuple[str, ...], env: tuple[tuple[str, str], ...], params: dict[str, Any]):
    """(args, env) with a trial's `params` in place of their `${name}` references."""
    return (
        tuple(substitute(a, params) for a in args),
        tuple((name, substitute(value, params)) for name, value in env),
    )
