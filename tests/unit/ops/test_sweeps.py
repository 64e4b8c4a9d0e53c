"""The trial table of a sweep: sorted by the metric for its goal (completed first, then pruned, running, failed),
the best marked, GPU-hours per trial and what pruning saved; the row of `vdk list`; picking a trial."""

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.sweeps import choose_trial
from vdk.plugin.ml_training.ops.sweeps import trial_table


def trial(number, state, metric=None, seconds=None, **params):
    return {
        "number": number,
        "state": state,
        "params": params or {"lr": number},
        "metric": metric,
        "steps": 10,
        "seconds": seconds,
        "slot": number,
        "why": "boom" if state == "failed" else None,
    }


def snapshot(goal="min", best=2):
    return {
        "metric": "eval_loss",
        "goal": goal,
        "trials_planned": 6,
        "best": best,
        "stopped": None,
        "finished": False,
        "trials": [
            trial(0, "pruned", 0.9, 600),
            trial(1, "complete", 0.5, 3600),
            trial(2, "complete", 0.2, 3600),
            trial(3, "failed", None, 60),
            trial(4, "running", 0.4, 1800),
            trial(5, "pruned", 0.8, 1200),
        ],
    }


def test_rows_are_sorted_by_the_metric_completed_first_and_the_best_is_marked():
    table = trial_table(snapshot(), gpus_per_trial=0.5)
    assert [r.number for r in table.rows] == [2, 1, 5, 0, 4, 3]
    assert [r.best for r in table.rows] == [True, False, False, False, False, False]
    assert table.rows[0].gpu_hours == pytest.approx(0.5)  # an hour on half a GPU (a MIG slice)
    # pruning saved the typical complete trial's hour minus what each pruned one ran: (3600-600)+(3600-1200) s
    assert table.saved_gpu_hours == pytest.approx((3000 + 2400) * 0.5 / 3600)
    assert table.summary() == {
        "trials": 6,
        "done": 2,
        "running": 1,
        "pruned": 2,
        "failed": 1,
        "metric": "eval_loss",
        "best_trial": 2,
        "best_metric": 0.2,
        "stopped": None,
    }


def test_a_maximised_metric_sorts_the_highest_first():
    table = trial_table(snapshot(goal="max", best=1), gpus_per_trial=1)
    assert [r.number for r in table.rows][:2] == [1, 2]
    assert table.best.number == 1


def test_choosing_a_trial_by_number_or_best_and_the_errors():
    table = trial_table(snapshot(), gpus_per_trial=1)
    assert choose_trial(table, "best").number == 2
    assert choose_trial(table, "4").state == "running"
    with pytest.raises(MLTrainingError) as info:
        choose_trial(table, "9")
    assert "0, 1, 2, 3, 4, 5" in info.value.fix
    empty = trial_table({**snapshot(best=None), "trials": [trial(0, "running")]}, 1)
    with pytest.raises(MLTrainingError) as info:
        choose_trial(empty, "best")
    assert "no completed trial" in info.value.problem
