"""The sweep's study on Optuna (in memory): the distributions of the sweep's parameters, its first trials all
failing stop it with why, the snapshot `vdk show` reads, and a metric seen on printed lines."""

import pytest

from vdk.plugin.ml_training.runtime import sweep_study
from vdk.plugin.ml_training.runtime.metrics import NAMES_MARK
from vdk.plugin.ml_training.runtime.metrics import printed_values
from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep
from vdk.plugin.ml_training.runtime.sweep_protocol import metric_line
from vdk.plugin.ml_training.runtime.sweep_protocol import read_study_lines
from vdk.plugin.ml_training.runtime.sweep_protocol import study_line

SWEEP = Sweep(
    parameters=(
        {"name": "lr", "kind": "loguniform", "low": 1e-5, "high": 1e-2},
        {"name": "bs", "kind": "list", "values": [16, 32]},
    ),
    trials=5,
    parallel=2,
    metric="eval_loss",
    goal="min",
    algorithm="tpe",
    prune=True,
    stop_after_failures=2,
    seed=1,
)


def test_the_first_trials_all_failing_stop_the_sweep_with_why():
    engine = sweep_study.optuna()
    study = sweep_study.open_study(SWEEP, engine.storages.InMemoryStorage())
    first = sweep_study.ask(study, SWEEP, slot=0)
    assert 1e-5 <= first.params["lr"] <= 1e-2 and first.params["bs"] in (16, 32)
    first.set_user_attr(sweep_study.WHY, "the training exited with code 1")
    study.tell(first, state=engine.trial.TrialState.FAIL)
    assert sweep_study.stop_reason(study, SWEEP) is None  # one failure of two
    second = sweep_study.ask(study, SWEEP, slot=1)
    second.set_user_attr(sweep_study.WHY, "the training exited with code 1")
    study.tell(second, state=engine.trial.TrialState.FAIL)
    reason = sweep_study.stop_reason(study, SWEEP)
    assert reason is not None and "first 2 trials all failed (the training exited with code 1)" in reason


def test_a_success_among_the_first_trials_keeps_the_sweep_going_and_the_snapshot_names_the_best():
    engine = sweep_study.optuna()
    study = sweep_study.open_study(SWEEP, engine.storages.InMemoryStorage())
    good = sweep_study.ask(study, SWEEP, slot=0)
    good.report(0.7, 1)
    study.tell(good, 0.5)
    bad = sweep_study.ask(study, SWEEP, slot=1)
    study.tell(bad, state=engine.trial.TrialState.FAIL)
    assert sweep_study.stop_reason(study, SWEEP) is None
    snapshot = read_study_lines(["noise", study_line(sweep_study.snapshot(study, SWEEP)), "more noise"])
    assert snapshot["best"] == good.number and not snapshot["finished"]
    assert [t["state"] for t in snapshot["trials"]] == ["complete", "failed"]
    assert snapshot["trials"][0]["slot"] == 0 and snapshot["trials"][0]["steps"] == 1


def test_printed_metrics_are_read_in_the_forms_scripts_print_them():
    assert printed_values("epoch 3: val_loss=0.4312 val_acc=0.91") == [("val_loss", 0.4312), ("val_acc", 0.91)]
    assert printed_values("{'eval_loss': 0.53, 'epoch': 1.0}") == [("eval_loss", 0.53), ("epoch", 1.0)]
    assert printed_values("loss: 1.5e-3, lr: 3e-4") == [("loss", 1.5e-3), ("lr", 3e-4)]
    assert printed_values("step 3/100 id=abc12 at 12:30") == []


def test_a_trial_worse_than_the_median_is_pruned_while_it_runs_and_not_once_its_script_ended(tmp_path):
    engine = sweep_study.optuna()
    study = sweep_study.open_study(SWEEP, engine.storages.InMemoryStorage())
    good = sweep_study.ask(study, SWEEP, slot=0)
    for step in range(3):
        good.report(0.1, step)
    study.tell(good, 0.1)
    lines = [metric_line(step, 5.0) for step in range(3)]
    running, ended = tmp_path / "running.log", tmp_path / "ended.log"
    running.write_text("\n".join(lines) + "\n")
    ended.write_text("\n".join([*lines, f"{NAMES_MARK} eval_loss,loss"]) + "\n")  # what rank 0 writes at its end
    assert sweep_study.TrialReports(sweep_study.ask(study, SWEEP, slot=1), running, prune=True).poll()
    late = sweep_study.TrialReports(sweep_study.ask(study, SWEEP, slot=2), ended, prune=True)
    assert not late.poll() and late.last == (2, 5.0) and late.names == ["eval_loss", "loss"]
    off = sweep_study.TrialReports(sweep_study.ask(study, SWEEP, slot=3), running, prune=False)
    assert not off.poll()  # prune = off


def test_a_trial_is_judged_at_steps_the_completed_trials_never_reported():
    """Trials report once per period of wall clock, so at steps of their own: each completed trial is read at the
    judged step as its last value at or before it (Optuna's MedianPruner wants a value at that very step)."""
    engine = sweep_study.optuna()
    study = sweep_study.open_study(SWEEP, engine.storages.InMemoryStorage())
    early = sweep_study.ask(study, SWEEP, slot=0)
    early.report(5.0, 4)
    assert not early.should_prune()  # no trial completed yet
    study.tell(early, state=engine.trial.TrialState.PRUNED)
    done = sweep_study.ask(study, SWEEP, slot=1)
    for step, value in ((1, 2.0), (5, 1.0), (9, 0.5)):
        done.report(value, step)
    study.tell(done, 0.5)
    worse, better = sweep_study.ask(study, SWEEP, slot=2), sweep_study.ask(study, SWEEP, slot=3)
    for step, value in ((2, 3.0), (4, 2.5), (8, 2.0)):  # never a step the completed trial reported
        worse.report(value, step)
        better.report(value / 4, step)
    assert worse.should_prune()  # 2.0 at step 8, against 1.0 (its step 5)
    assert not better.should_prune()
    assert engine.pruners.MedianPruner(n_startup_trials=1).prune(study, study.trials[worse.number]) is False
    before = sweep_study.ask(study, SWEEP, slot=4)
    before.report(9.0, 0)  # before the completed trial's first report: nothing to compare with
    assert not before.should_prune()
    curve = {1: 2.0, 5: 1.0, 9: 0.5}
    assert [sweep_study.value_at(curve, s) for s in (0, 1, 4, 5, 8, 30)] == [None, 2.0, 2.0, 1.0, 1.0, 0.5]


def test_a_goal_of_max_prunes_the_trials_below_the_median():
    engine = sweep_study.optuna()
    sweep = Sweep(**{**SWEEP.__dict__, "goal": "max"})
    study = sweep_study.open_study(sweep, engine.storages.InMemoryStorage())
    done = sweep_study.ask(study, sweep, slot=0)
    done.report(0.9, 3)
    study.tell(done, 0.9)
    low, high = sweep_study.ask(study, sweep, slot=1), sweep_study.ask(study, sweep, slot=2)
    low.report(0.5, 7)
    high.report(0.95, 7)
    assert low.should_prune() and not high.should_prune()


class StudyRestarting:
    """A trial whose study stops answering at its `at`-th report (the study's pod restarts): the gRPC proxy raises."""

    def __init__(self, trial, at: int):
        self.trial, self.at, self.calls = trial, at, 0

    def report(self, value, step):
        self.calls += 1
        if self.calls == self.at:
            raise ConnectionError("the study's pod is restarting")
        self.trial.report(value, step)

    def __getattr__(self, name):
        return getattr(self.trial, name)


def test_metric_lines_the_study_did_not_take_are_reported_once_it_answers_again(tmp_path):
    engine = sweep_study.optuna()
    study = sweep_study.open_study(SWEEP, engine.storages.InMemoryStorage())
    trial = sweep_study.ask(study, SWEEP, slot=0)
    path = tmp_path / "metrics.log"
    path.write_text("".join(metric_line(step, 1.0 / step) + "\n" for step in (1, 5, 9)))
    reports = sweep_study.TrialReports(StudyRestarting(trial, at=2), path, prune=True)
    with pytest.raises(ConnectionError):
        reports.poll()  # reported step 1, not step 5
    with open(path, "a") as f:
        f.write(metric_line(13, 1 / 13) + "\n" + f"{NAMES_MARK} eval_loss\n")  # the script ended meanwhile
    assert not reports.poll()  # ended: complete, not pruned
    assert sorted(study.trials[trial.number].intermediate_values) == [1, 5, 9, 13]
    assert reports.last == (13, 1 / 13) and reports.names == ["eval_loss"]
