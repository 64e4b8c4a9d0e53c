"""Per-run overrides (job/overrides.py): `--set KEY=VALUE` and `--args` parsed, refused with the fix, and read by
load_job_spec exactly as config.ini's lines, with errors that name `--set`."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.overrides import describe
from vdk.plugin.ml_training.job.overrides import parse_overrides


def test_sets_and_args_become_one_mapping_in_order():
    assert parse_overrides(["smoke_steps=3", "Smoke-Processes = 2"], "--lr 1e-3") == {
        "smoke_steps": "3",
        "smoke_processes": "2",
        "args": "--lr 1e-3",
    }
    assert parse_overrides(["args="]) == {"args": ""}  # no arguments at all, as `args =` in config.ini
    assert describe({"smoke_steps": "3", "args": "--lr 1e-3", "smoke_args": ""}) == (
        "smoke_steps=3, args='--lr 1e-3', smoke_args=''"
    )


@pytest.mark.parametrize(
    ("sets", "args", "problem", "fix"),
    [
        (["smoke_steps"], None, "is not KEY=VALUE", "--set smoke_steps=3"),
        (["smoke_stepz=3"], None, "'smoke_stepz' is not a key of [ml-training]", "--set smoke_steps=..."),
        (["nodes=2", "nodes=3"], None, "sets nodes twice", "keep one"),
        (["args=--a"], "--b", "both set args", "keep one"),
        (["nodes="], None, "has no value", "--set nodes=2"),
        (["nodes=2 # two"], None, "'# two' is not part of a value", "--set nodes=2"),
    ],
)
def test_a_bad_override_says_what_to_write(sets, args, problem, fix):
    with pytest.raises(MLTrainingError) as info:
        parse_overrides(sets, args)
    assert problem in info.value.problem and fix in info.value.fix


def test_overrides_win_over_config_ini_and_are_kept_on_the_spec(tmp_path):
    job = write_job(tmp_path, ml={"smoke_steps": "1", "args": "--epochs 9", "gpus_per_node": "0"})
    spec = load_job_spec(job, overrides={"smoke_steps": "3", "args": "--lr 1e-3"})
    assert (spec.smoke_steps, spec.args) == (3, ("--lr", "1e-3"))
    assert spec.overrides == (("smoke_steps", "3"), ("args", "--lr 1e-3"))
    assert load_job_spec(job).overrides == () and load_job_spec(job).smoke_steps == 1
    # what is trained is what the values are, however they were given
    assert (
        spec.fingerprint()
        == load_job_spec(
            write_job(tmp_path / "b", ml={"smoke_steps": "3", "args": "--lr 1e-3", "gpus_per_node": "0"})
        ).fingerprint()
    )


def test_an_override_the_reader_refuses_names_set_and_its_fix(tmp_path):
    job = write_job(tmp_path, ml={"gpus_per_node": "0"})
    with pytest.raises(JobConfigError) as info:
        load_job_spec(job, overrides={"smoke_steps": "many"})
    assert "--set smoke_steps=many (for this run, over config.ini): 'many' is not a whole number" in info.value.problem
    assert info.value.fix.startswith("set `--set smoke_steps=1`")
