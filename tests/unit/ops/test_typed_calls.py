"""The Python API checks its inputs before it does anything (ops/typed_calls.py): a wrong type is one
MLTrainingError that names the function, the parameter, what it takes and what it got, with the fix; never an
AttributeError from deep inside, and never a wrong thing done (`skip_smoke="false"` skipping the smoke check)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Literal

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops import deploy
from vdk.plugin.ml_training.ops import diff_runs
from vdk.plugin.ml_training.ops import local_run
from vdk.plugin.ml_training.ops import scope
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.typed_calls import checked

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient  # for type checkers only: not checked at run time


@checked
def toy(
    flag: bool = False,
    count: int = 1,
    rate: float = 0.5,
    where: Path | None = None,
    mode: Literal["a", "b"] = "a",
    say: Callable[[str], None] | None = None,
    client: KubeClient | None = None,
) -> tuple:
    return flag, count, rate, where, mode, say, client


def refusal(call: Callable, *args, **kwargs) -> MLTrainingError:
    with pytest.raises(MLTrainingError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_what_fits_passes_unchanged():
    assert toy(True, 3, 2, "runs/x", "b", print, object())[:5] == (True, 3, 2, "runs/x", "b")
    assert toy(where=Path("x"), rate=0.1, say=None) == (False, 1, 0.1, Path("x"), "a", None, None)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"flag": "false"}, ["toy(flag=...) takes True or False, not the str 'false'", "pass flag=False"]),
        ({"flag": "yes"}, ["pass flag=True"]),
        ({"flag": 1}, ["takes True or False, not the int 1"]),
        ({"count": True}, ["takes a whole number, not the bool True"]),
        ({"rate": "0.1"}, ["takes a number, not the str '0.1'"]),
        ({"where": 7}, ["takes a path or None, not the int 7"]),
        ({"mode": "c"}, ["takes one of 'a', 'b'"]),
        ({"say": "loud"}, ["takes a function or None"]),
        ({"flg": True}, ["unexpected keyword argument 'flg'", "toy(flag, count, rate"]),
    ],
)
def test_a_wrong_type_is_one_clear_error_with_its_fix(kwargs, words):
    error = refusal(toy, **kwargs)
    for word in words:
        assert word in error.message, error.message


def test_the_use_cases_refuse_wrong_inputs_before_doing_anything(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "typed", ml={"gpus_per_node": "0"}))
    error = refusal(deploy.deploy, spec, skip_smoke="false")
    assert "deploy(skip_smoke=...) takes True or False, not the str 'false'" in error.problem
    assert "pass skip_smoke=False" in error.fix
    error = refusal(local_run.run_job, str(tmp_path / "typed"))
    assert "run_job(spec=...) takes an MLJobSpec, not the str" in error.problem
    assert "api.deploy_spec(PATH)" in error.fix  # as a notebook makes one, through the front door
    assert "find_scope(name=...) takes text (a str) or None, not the int 3" in refusal(scope.find_scope, name=3).problem
    empty = Scope(team=None, job_name="typed", job_dir=None, context=None, namespace=None)
    error = refusal(diff_runs.diff_runs, empty, "", "b")
    assert "RUN_A is empty ('')" in error.problem and "vdk diff -n typed RUN_A RUN_B" in error.fix
