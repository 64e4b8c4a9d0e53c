"""What the parts of a sweep tell each other (runtime/sweep_protocol.py), each format written and read back: a
trial's metric settings (the same for a trial pod and a local sweep), the sweep as JSON, `${name}` references, the
metric lines of a trial's rank 0 and the study lines of the study's pod, found among any other output."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep

SWEEP = Sweep(
    parameters=(
        {"name": "lr", "kind": wire.LOGUNIFORM, "low": 1e-5, "high": 1e-2},
        {"name": "batch", "kind": wire.LIST, "values": [16, 32]},
        {"name": "layers", "kind": wire.INT, "low": 2, "high": 4},
    ),
    trials=8,
    parallel=2,
    metric="eval_loss",
    goal=wire.MIN,
    algorithm=wire.TPE,
    prune=True,
    stop_after_failures=3,
    seed=7,
)


def test_the_sweep_reads_back_from_its_json_as_it_was():
    assert Sweep.from_json(SWEEP.to_json()) == SWEEP
    assert SWEEP.names == ["lr", "batch", "layers"]


def test_a_grid_needs_every_parameter_finite():
    assert SWEEP.grid() is None and wire.grid_size(SWEEP.parameters) is None  # lr is continuous
    finite = SWEEP.parameters[1:] + ({"name": "opt", "kind": wire.CHOICE, "values": ["adam", "sgd"]},)
    grid = Sweep(**{**SWEEP.__dict__, "parameters": finite}).grid()
    assert grid == {"batch": [16, 32], "layers": [2, 3, 4], "opt": ["adam", "sgd"]}
    assert wire.grid_size(finite) == 2 * 3 * 2


def test_better_follows_the_goal():
    assert SWEEP.better(0.1, 0.2) and not SWEEP.better(0.2, 0.1)
    maximise = Sweep(**{**SWEEP.__dict__, "goal": wire.MAX})
    assert maximise.better(0.2, 0.1) and not maximise.better(0.1, 0.2)


def test_references_are_substituted_by_name_and_unknown_ones_stay():
    text = "--lr ${lr} --batch=${batch} --keep ${other} ${ lr}"
    assert wire.references(text) == ["lr", "batch", "other", " lr"]  # as written: the spec checks the names
    out = wire.substitute(text, {"lr": 0.0003, "batch": 32, "flag": True})
    assert out == "--lr 0.0003 --batch=32 --keep ${other} ${ lr}"
    assert wire.format_value(True) == "true" and wire.format_value(1e-05) == "1e-05"


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=10**9), st.floats()), max_size=20))
def test_metric_lines_read_back_among_other_output_finite_values_only(pairs):
    lines = []
    for step, value in pairs:
        lines += ["epoch 3: loss=0.5", wire.metric_line(step, value)]
    assert wire.read_metric_lines(lines) == [(step, value) for step, value in pairs if math.isfinite(value)]


def test_a_broken_metric_line_is_skipped():
    lines = [f"{wire.METRIC_MARK} step=x value=1", f"{wire.METRIC_MARK} value=1", wire.metric_line(3, 0.5)]
    assert wire.read_metric_lines(lines) == [(3, 0.5)]


def test_the_last_readable_study_line_is_the_study():
    first = {"trials": [{"number": 0}], "stopped": None, "finished": False}
    last = {"trials": [{"number": 0}, {"number": 1}], "stopped": "3 trials failed", "finished": True}
    lines = ["noise", wire.study_line(first), wire.study_line(last), f"{wire.STUDY_MARK} {{not json"]
    assert wire.read_study_lines(lines) == last
    assert wire.read_study_lines(["no study here"]) is None


def test_a_trial_is_told_its_metric_its_values_as_json_and_the_job_s_progress_period():
    told = wire.metric_environment({protocol.PROGRESS_SECONDS: "5"}, "eval_loss", "/tmp/m", {"lr": 0.1, "bs": 8})
    assert told[wire.METRIC] == "eval_loss" and told[wire.METRIC_FILE] == "/tmp/m"
    assert json.loads(told[wire.TRIAL_PARAMS]) == {"bs": 8, "lr": 0.1} and told[wire.METRIC_SECONDS] == "5"
    no_lines = wire.metric_environment({protocol.PROGRESS_SECONDS: "0"}, "loss", "/tmp/m", {})
    assert no_lines[wire.METRIC_SECONDS] == str(wire.DEFAULT_METRIC_SECONDS)  # 0 turns progress lines off, not this
    own = wire.metric_environment({wire.METRIC_SECONDS: "1"}, "loss", "/tmp/m", {})
    assert wire.METRIC_SECONDS not in own  # the job's own setting stays


def test_why_a_sweep_stopped_is_one_line():
    assert wire.stop_line("the first 3 trials failed") == "[vdk-ml-training] sweep stopped: the first 3 trials failed"
