"""[ml-training.sweep] -> SweepSpec: the grammar of parameters (hypothesis: every value written as the docs say
reads back the same), the settings and their defaults, every bad sweep as one error naming file, section and key,
and a trial's spec with its values substituted."""

import math

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.sweep_grammar import GrammarError
from vdk.plugin.ml_training.job.sweep_grammar import parse_parameter
from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep
from vdk.plugin.ml_training.runtime.sweep_protocol import format_value
from vdk.plugin.ml_training.runtime.sweep_protocol import substitute


def sweep_job(tmp_path, sweep: str, args: str = "--lr ${lr} --batch-size ${batch_size}", env=None, name="sw"):
    return write_job(
        tmp_path, name, ml={"args": args, "gpus_per_node": "0"}, env=env, extra=f"\n[ml-training.sweep]\n{sweep}"
    )


def error_of(job) -> JobConfigError:
    with pytest.raises(JobConfigError) as info:
        load_job_spec(job)
    return info.value


EXAMPLE = """lr = loguniform(1e-5, 1e-2)
batch_size = choice(16, 32, 64)
trials = 24
parallel = 6
metric = eval_loss
"""


def test_the_issue_example_reads_into_a_tpe_sweep(tmp_path):
    spec = load_job_spec(sweep_job(tmp_path, EXAMPLE))
    sweep = spec.sweep
    assert sweep is not None
    assert (sweep.trials, sweep.parallel, sweep.metric, sweep.goal) == (24, 6, "eval_loss", "min")
    assert sweep.algorithm == "tpe" and sweep.prune is True and sweep.stop_after_failures == 3
    lr, batch = sweep.parameters
    assert (lr.kind, lr.low, lr.high) == ("loguniform", 1e-5, 1e-2)
    assert (batch.kind, batch.values) == ("choice", (16, 32, 64))
    assert spec.to_dict()["sweep"]["parameters"] == {
        "lr": "loguniform(1e-05, 0.01)",
        "batch_size": "choice(16, 32, 64)",
    }


def test_lists_only_make_a_grid_whose_size_is_the_default_number_of_trials(tmp_path):
    spec = load_job_spec(sweep_job(tmp_path, "lr = 1e-3, 1e-4, 3e-4\nbatch_size = [16, 32]\nmetric = loss\n"))
    assert spec.sweep.algorithm == "grid"
    assert spec.sweep.trials == 6 == spec.sweep.grid_size()
    assert Sweep.from_json(spec.sweep.to_wire().to_json()).grid() == {"lr": [1e-3, 1e-4, 3e-4], "batch_size": [16, 32]}


def test_settings_read_their_values(tmp_path):
    sweep = "lr = uniform(0, 1)\nbatch_size = int(2, 8)\ntrials = 5\nmetric = val/acc\ngoal = maximize\n"
    sweep += "algorithm = random\nprune = off\nstop_after_failures = 2\nseed = 7\n"
    spec = load_job_spec(sweep_job(tmp_path, sweep)).sweep
    assert (spec.goal, spec.algorithm, spec.prune, spec.stop_after_failures, spec.seed) == (
        "max",
        "random",
        False,
        2,
        7,
    )
    assert spec.metric == "val/acc"


def test_a_trial_substitutes_its_values_in_args_smoke_args_and_env(tmp_path):
    job = write_job(
        tmp_path,
        "sw",
        ml={"args": "--lr=${lr} --bs ${batch_size} --tag run-${batch_size}", "smoke_args": "--bs ${batch_size}"},
        env={"LEARNING_RATE": "${lr}", "OTHER": "$HOME ${unknown"},
        extra="\n[ml-training.sweep]\nlr = loguniform(1e-5, 1e-2)\nbatch_size = 16, 32\ntrials = 4\nmetric = loss\n",
    )
    spec = load_job_spec(job)
    trial = spec.trial({"lr": 0.0003, "batch_size": 32})
    assert trial.args == ("--lr=0.0003", "--bs", "32", "--tag", "run-32")
    assert trial.smoke_args == ("--bs", "32")
    assert trial.env_dict == {"LEARNING_RATE": "0.0003", "OTHER": "$HOME ${unknown"}
    assert trial.sweep is None and spec.sweep is not None


@pytest.mark.parametrize(
    ("sweep", "args", "key", "words"),
    [
        (
            "lr = lognormal(1, 2)\nmetric = loss\ntrials = 2\n",
            "--lr ${lr}",
            "lr",
            ["lognormal(...) is not a distribution", "loguniform"],
        ),
        ("lr = loguniform(0, 1)\nmetric = loss\ntrials = 2\n", "--lr ${lr}", "lr", ["above zero"]),
        ("lr = loguniform(-1e-3, 1)\nmetric = loss\ntrials = 2\n", "--lr ${lr}", "lr", ["above zero"]),
        (
            "lr = uniform(1, 0.5)\nmetric = loss\ntrials = 2\n",
            "--lr ${lr}",
            "lr",
            ["first bound must be below", "uniform(0.5, 1)"],
        ),
        ("lr = int(1.5, 3)\nmetric = loss\ntrials = 2\n", "--lr ${lr}", "lr", ["whole numbers"]),
        ("lr = 1, 2, 1\nmetric = loss\n", "--lr ${lr}", "lr", ["listed twice"]),
        ("lr = 1,, 2\nmetric = loss\n", "--lr ${lr}", "lr", ["empty value"]),
        ("lr = 1e-3, 1e-4\nmetric = loss\n", "--lr ${lr} --bs ${batch}", "args", ["${batch} names no parameter"]),
        (
            "lr = 1e-3, 1e-4\nbs = 1, 2\nmetric = loss\n",
            "--lr ${lr}",
            "bs",
            ["no value references the parameter bs", "${bs}"],
        ),
        (
            "lr = 1e-3, 1e-4\nbs = 1, 2, 3\ntrials = 4\nmetric = loss\n",
            "--lr ${lr} --bs ${bs}",
            "trials",
            ["6 combinations", "trials = 4", "trials = 6"],
        ),
        (
            "lr = uniform(0, 1)\ntrials = 3\nparallel = 4\nmetric = loss\n",
            "--lr ${lr}",
            "parallel",
            ["more than trials = 3"],
        ),
        ("lr = uniform(0, 1)\nmetric = loss\n", "--lr ${lr}", "trials", ["how many trials"]),
        ("lr = uniform(0, 1)\ntrials = 3\n", "--lr ${lr}", "metric", ["no metric"]),
        (
            "lr = uniform(0, 1)\ntrials = 3\nmetric = loss\nalgorithm = grid\n",
            "--lr ${lr}",
            "algorithm",
            ["finite set", "tpe"],
        ),
        (
            "lr = uniform(0, 1)\ntrials = 3\nmetric = loss\nalgorithm = tpee\n",
            "--lr ${lr}",
            "algorithm",
            ["did you mean `tpe`"],
        ),
        ("lr = uniform(0, 1)\ntrials = 3\nmetric = loss\ngoal = up\n", "--lr ${lr}", "goal", ["neither min nor max"]),
        ("lr = uniform(0, 1)\ntrials = 3\nmetric = loss  # the loss\n", "--lr ${lr}", "metric", ["no inline comments"]),
        ("lr = uniform(0, 1)\ntrials = zero\nmetric = loss\n", "--lr ${lr}", "trials", ["whole number"]),
        ("2lr = uniform(0, 1)\ntrials = 2\nmetric = loss\n", "--lr ${lr}", "2lr", ["not a parameter name"]),
        ("trials = 2\nmetric = loss\n", "", None, ["no parameters"]),
    ],
)
def test_every_bad_sweep_is_one_error_naming_the_key_and_the_fix(tmp_path, sweep, args, key, words):
    error = error_of(sweep_job(tmp_path, sweep, args=args))
    assert error.section in ("ml-training.sweep", "ml-training")
    assert error.key == key
    assert error.fix
    for word in words:
        assert word in error.message, error.message


def test_a_misspelt_setting_is_said_so_and_never_turned_into_a_parameter(tmp_path):
    error = error_of(sweep_job(tmp_path / "a", "lr = 1e-3, 1e-4\nmetrc = val_loss\ntrials = 2\n", args="--lr ${lr}"))
    assert error.key == "metrc" and "'metrc' is not a setting of [ml-training.sweep]" in error.problem
    assert error.fix.startswith("did you mean `metric = val_loss`?")
    assert "${metrc}" not in error.fix.split("?")[0] and "--metrc" not in error.fix  # the typo is not spread
    # used as a parameter, a key spelt like a setting is one
    spec = load_job_spec(
        sweep_job(tmp_path / "b", "lr = 1, 2\nseeds = 1, 2\nmetric = loss\n", args="--lr ${lr} ${seeds}")
    )
    assert spec.sweep is not None and spec.sweep.names == ["lr", "seeds"]
    # a key of [ml-training] written in the sweep's section is told where it goes
    moved = error_of(sweep_job(tmp_path / "c", "lr = 1, 2\nsmoke_steps = 3\nmetric = loss\n", args="--lr ${lr}"))
    assert moved.key == "smoke_steps" and moved.fix.startswith("move `smoke_steps = 3` to [ml-training]")


def test_a_reference_in_an_env_value_counts_and_an_unknown_one_names_the_variable(tmp_path):
    load_job_spec(sweep_job(tmp_path, "lr = 1, 2\nmetric = loss\n", args="", env={"LR": "${lr}"}))
    error = error_of(
        sweep_job(tmp_path, "lr = 1, 2\nmetric = loss\n", args="--lr ${lr}", env={"X": "${lrr}"}, name="b")
    )
    assert (error.section, error.key) == ("ml-training.env", "X")
    assert "did you mean `${lr}`" in error.fix


def test_a_job_without_a_sweep_keeps_its_dollar_braces_as_written(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "plain", ml={"args": "--x ${y}"}))
    assert spec.sweep is None and spec.args == ("--x", "${y}")


# --- the grammar, property-based --------------------------------------------------------------------------

words = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True)
numbers = st.one_of(st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
values = st.lists(st.one_of(words, numbers), min_size=1, max_size=6, unique_by=lambda v: (type(v) is str, v))


def _unique(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


@settings(max_examples=200, deadline=None)
@given(values)
def test_a_written_list_reads_back_the_same_values(items):
    items = _unique(items)
    for text in (", ".join(format_value(v) for v in items), "[" + ",".join(format_value(v) for v in items) + "]"):
        parameter = parse_parameter("p", text)
        assert parameter.kind == "list"
        assert list(parameter.values) == items
        assert [type(v) for v in parameter.values] == [type(v) for v in items]


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-12, 1e6), st.floats(1e-12, 1e6), st.sampled_from(["uniform", "loguniform"]))
def test_a_range_reads_back_its_bounds(a, b, kind):
    low, high = min(a, b), max(a, b)
    text = f"{kind}({format_value(low)}, {format_value(high)})"
    if low == high:
        with pytest.raises(GrammarError):
            parse_parameter("p", text)
        return
    parameter = parse_parameter("p", text)
    assert (parameter.kind, parameter.low, parameter.high) == (kind, low, high)
    assert parameter.extremes() == (low, high)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_any_text_is_a_parameter_or_one_grammar_error(text):
    try:
        parameter = parse_parameter("p", text)
    except GrammarError as e:
        assert e.problem and e.fix
        return
    assert parameter.kind in ("list", "choice", "uniform", "loguniform", "int")
    for value in parameter.values:
        assert not isinstance(value, float) or math.isfinite(value)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), st.one_of(words, numbers), max_size=4),
    st.text(alphabet="ab ${}-=", max_size=30),
)
def test_substitution_replaces_exactly_the_known_references(params, text):
    tail = "".join(f" --{name} ${{{name}}}" for name in params)
    out = substitute(text + tail, params)
    assert out.endswith("".join(f" --{name} {format_value(value)}" for name, value in params.items()))
    assert substitute(text, {}) == text


def test_the_documented_settings_are_the_catalogue_of_the_sweep():
    import re
    from pathlib import Path

    from vdk.plugin.ml_training.job.sweep import SWEEP_KEYS

    page = (Path(__file__).resolve().parents[3] / "docs" / "sweeps.md").read_text()
    settings = page.split("## Settings", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([a-z_]+)` \|", settings, re.M) == [key.name for key in SWEEP_KEYS]


# --- sizes: what the config accepts, the backends and the OS carry; a limit says its reason ---------------------


def test_more_trials_than_a_sweep_runs_are_refused_with_the_reason_not_as_a_bad_number(tmp_path):
    error = error_of(sweep_job(tmp_path, "lr = uniform(0, 1)\ntrials = 1000000\nmetric = loss\n", args="--lr ${lr}"))
    assert error.key == "trials"
    assert "not a whole number" not in error.problem
    assert "trials = 1000000 is above 10000" in error.problem and "a process each" in error.problem
    assert "tpe" in error.fix


def test_a_grid_of_a_million_combinations_is_refused_up_front_and_a_sample_of_it_is_not(tmp_path):
    values = ", ".join(str(i) for i in range(100))
    sweep = f"a = {values}\nb = {values}\nc = {values}\nmetric = loss\n"
    error = error_of(sweep_job(tmp_path, sweep, args="--a ${a} --b ${b} --c ${c}"))
    assert error.key == "trials" and "1000000 combinations" in error.problem and "at most 10000" in error.problem
    assert "algorithm = random" in error.fix
    spec = load_job_spec(
        sweep_job(tmp_path, sweep + "algorithm = random\ntrials = 50\n", args="--a ${a} --b ${b} --c ${c}", name="b")
    )
    assert spec.sweep.trials == 50 and len(spec.sweep.trial_values()) == 50


def test_the_most_trials_a_sweep_runs_are_accepted_and_each_is_checked(tmp_path):
    spec = load_job_spec(sweep_job(tmp_path, "lr = uniform(0, 1)\ntrials = 10000\nparallel = 10000\nmetric = loss\n",
                                   args="--lr ${lr}"))  # fmt: skip
    assert (spec.sweep.trials, spec.sweep.parallel) == (10000, 10000)
    assert len(spec.sweep.trial_values()) == 10000


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("seed = 4294967296", ["seed = 4294967296 is above 4294967295", "2**32"]),
        ("trials = 0", ["trials = 0 is below 1"]),
        ("stop_after_failures = 20000", ["above 10000"]),
        ("trials = 1e3", ["'1e3' is not a whole number"]),
    ],
)
def test_each_limit_says_its_own_reason(tmp_path, setting, words):
    sweep = f"lr = uniform(0, 1)\nmetric = loss\n{setting}\n" + ("" if setting.startswith("trials") else "trials = 5\n")
    error = error_of(sweep_job(tmp_path, sweep, args="--lr ${lr}"))
    for word in words:
        assert word in error.problem, error.problem


def test_lists_too_long_for_the_pods_variable_are_refused_naming_the_parameter(tmp_path):
    long_words = ", ".join(f"w{i:04d}" + "x" * 60 for i in range(1500))  # ~100 KB as JSON
    error = error_of(sweep_job(tmp_path, f"lr = uniform(0, 1)\nword = {long_words}\ntrials = 5\nmetric = loss\n"
                               "algorithm = random\n", args="--lr ${lr} --w ${word}"))  # fmt: skip
    assert error.key == "word" and "more than the 65.5 KB a pod's variable" in error.problem
    assert "a variable of 131.1 KB" in error.problem


@pytest.mark.parametrize(
    "text",
    ["adam, 'sgd\x1b[2J'", "'a,b', c", "'32', 32", "choice('x y', z)", '"it\'s", b', "1e-3, 2"],
)
def test_a_parameter_as_described_reads_back_the_same_so_a_run_record_keeps_it(text):
    written = parse_parameter("p", text)
    assert parse_parameter("p", written.describe()) == written
