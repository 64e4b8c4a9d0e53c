"""The MLflow run of a training run (runtime/mlflow_runs.py) as its writer drives the REST calls: made with the first
points, its tags and params, batches at most every POST_SECONDS, a server that does not answer, the end, a script
that logs to MLflow itself. (A real `mlflow server`: tests/integration/ops/test_viewers.py.)"""

from __future__ import annotations

import io
import sys
import types

import pytest

from vdk.plugin.ml_training.runtime import mlflow_runs
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.mlflow_runs import MlflowError
from vdk.plugin.ml_training.runtime.mlflow_runs import MlflowWriter
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts


class Rest:
    """MlflowRest's calls, kept; `down` makes each raise as a server that does not answer."""

    uri = "http://127.0.0.1:5000"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.down = False

    def _call(self, *call) -> None:
        if self.down:
            raise MlflowError(f"{self.uri}: timed out")
        self.calls.append(call)

    def experiment_id(self, name: str) -> str:
        self._call("experiment", name)
        return "7"

    def create_run(self, experiment: str, name: str, tags: dict, start_ms: int) -> str:
        self._call("create", experiment, name, tags)
        return "run-1"

    def log_batch(self, mlflow_run_id: str, metrics=None, params=None) -> None:
        self._call("log", mlflow_run_id, list(metrics or []), dict(params or {}))

    def end_run(self, mlflow_run_id: str, status: str, end_ms: int) -> None:
        self._call("end", mlflow_run_id, status)

    def delete_run(self, mlflow_run_id: str) -> None:
        self._call("delete", mlflow_run_id)

    def logged(self) -> list[tuple[str, float, int]]:
        return [(m["key"], m["value"], m["step"]) for c in self.calls if c[0] == "log" for m in c[2]]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


FACTS = RunFacts(
    run="spirals-20260101-120000-abcdefgh",
    job="spirals",
    team="vision",
    image="registry/spirals@sha256:00",
    commit="c0ffee",
    dirty=True,
    datasets={"data/train": "v3"},
    config={"args": "--lr ${lr}", "nodes": "2"},
    params={"lr": 0.01},
    parent="parent-9",
)


def writer(rest: Rest, clock: Clock, err=None, facts: RunFacts = FACTS) -> MlflowWriter:
    return MlflowWriter(rest, facts, "spirals", err or io.StringIO(), clock=clock, wall=lambda: 1_000.0)


def test_the_run_is_made_with_the_first_points_with_its_tags_and_params():
    rest, clock = Rest(), Clock()
    w = writer(rest, clock)
    assert rest.calls == []
    w.write([Point("loss", 0.5, 1, 10.0)])
    (experiment, create, params, first) = rest.calls
    assert experiment == ("experiment", "spirals")
    _, experiment_id, name, tags = create
    assert (experiment_id, name) == ("7", FACTS.run)
    assert tags == {
        "mlflow.source.name": "vdk-ml-training",
        "mlflow.runName": FACTS.run,
        "vdk.run": FACTS.run,
        "vdk.job": "spirals",
        "vdk.team": "vision",
        "vdk.image": "registry/spirals@sha256:00",
        "mlflow.source.git.commit": "c0ffee",
        "vdk.commit": "c0ffee (with uncommitted changes)",
        "vdk.dataset.data/train": "v3",
        "mlflow.parentRunId": "parent-9",
    }
    assert params[3] == {"args": "--lr ${lr}", "nodes": "2", "lr": "0.01"}  # the trial's values win
    assert first[2] == [{"key": "loss", "value": 0.5, "timestamp": 10_000, "step": 1}]


def test_points_are_posted_in_batches_at_most_every_period_and_the_rest_at_the_end():
    rest, clock = Rest(), Clock()
    w = writer(rest, clock)
    w.write([Point("loss", 0.5, 1, 1.0)])
    clock.now = 5.0
    w.write([Point("loss", 0.4, 2, 2.0)])
    assert rest.logged() == [("loss", 0.5, 1)]
    clock.now = mlflow_runs.POST_SECONDS + 0.1
    w.write([Point("loss", 0.3, 3, 3.0)])
    assert rest.logged() == [("loss", 0.5, 1), ("loss", 0.4, 2), ("loss", 0.3, 3)]
    w.write([Point("loss", 0.2, 4, 4.0)])
    w.close(protocol.FINISHED)
    assert rest.logged()[-1] == ("loss", 0.2, 4) and rest.calls[-1] == ("end", "run-1", "FINISHED")


def test_a_server_that_does_not_answer_is_said_once_and_its_points_are_sent_later():
    rest, clock, err = Rest(), Clock(), io.StringIO()
    w = writer(rest, clock, err)
    rest.down = True
    w.write([Point("loss", 0.5, 1, 1.0)])
    clock.now = 1000.0
    w.write([Point("loss", 0.4, 2, 2.0)])
    assert len(err.getvalue().splitlines()) == 1 and "not logged to MLflow" in err.getvalue()
    rest.down = False
    clock.now = 2000.0
    w.write([Point("loss", 0.3, 3, 3.0)])
    assert rest.logged() == [("loss", 0.5, 1), ("loss", 0.4, 2), ("loss", 0.3, 3)]
    assert "logged to MLflow again (after 2 failed posts)" in err.getvalue()


def test_a_failed_script_ends_its_run_as_failed():
    rest, clock = Rest(), Clock()
    w = writer(rest, clock)
    w.write([Point("loss", 0.5, 1, 1.0)])
    w.close(protocol.FAILED)
    assert rest.calls[-1] == ("end", "run-1", "FAILED")


def test_a_run_that_showed_nothing_makes_no_mlflow_run():
    rest = Rest()
    writer(rest, Clock()).close(protocol.FINISHED)
    assert rest.calls == []


@pytest.fixture
def scripts_mlflow(monkeypatch):
    """MLflow's client module as the script's `import mlflow` leaves it (its class, its fluent start_run)."""
    client = types.ModuleType("mlflow.tracking.client")

    class MlflowClient:
        def create_run(self, experiment_id, **kwargs):
            return f"the script's run in {experiment_id}"

    client.MlflowClient = MlflowClient
    fluent = types.ModuleType("mlflow.tracking.fluent")
    fluent.start_run = lambda **kwargs: "the script's active run"
    monkeypatch.setitem(sys.modules, "mlflow.tracking.client", client)
    monkeypatch.setitem(sys.modules, "mlflow.tracking.fluent", fluent)
    return client, fluent


def test_a_script_that_logs_to_mlflow_itself_is_not_doubled(scripts_mlflow):
    client, fluent = scripts_mlflow
    rest, clock, err = Rest(), Clock(), io.StringIO()
    w = writer(rest, clock, err)
    w.write([Point("loss", 0.5, 1, 1.0)])  # made before the script made its own
    assert client.MlflowClient().create_run("3") == "the script's run in 3"  # the script's call goes through
    clock.now = 100.0
    w.write([Point("loss", 0.4, 2, 2.0)])
    w.close(protocol.FINISHED)
    assert ("delete", "run-1") in rest.calls and not [c for c in rest.calls if c[0] == "end"]
    assert "the script logs to MLflow itself" in err.getvalue()


def test_a_script_that_starts_its_run_first_leaves_no_trace_of_ours(scripts_mlflow):
    _, fluent = scripts_mlflow
    rest = Rest()
    w = writer(rest, Clock())
    assert fluent.start_run(run_name="mine") == "the script's active run"
    w.write([Point("loss", 0.5, 1, 1.0)])
    w.close(protocol.FINISHED)
    assert rest.calls == []


def test_only_a_tracking_server_is_logged_to():
    err = io.StringIO()
    assert mlflow_runs.tracking_uri({}) is None
    assert mlflow_runs.tracking_uri({mlflow_runs.TRACKING_URI: "http://mlflow:5000"}) == "http://mlflow:5000"
    assert mlflow_runs.tracking_uri({mlflow_runs.TRACKING_URI: "file:///tmp/mlruns"}, err) is None
    assert "is not a tracking server" in err.getvalue()


def test_the_experiment_is_mlflows_setting_else_the_jobs():
    facts = RunFacts(job="spirals")
    assert mlflow_runs.experiment_of(facts, {}) == "spirals"
    assert mlflow_runs.experiment_of(facts, {mlflow_runs.EXPERIMENT_NAME: "team-x"}) == "team-x"
    assert mlflow_runs.experiment_of(facts, {mlflow_runs.EXPERIMENT_ID: "12"}) == "id:12"
    assert mlflow_runs.experiment_of(RunFacts(), {}) == "Default"


def test_a_cluster_sweeps_parent_run_is_made_once_and_kept_in_its_study():
    import optuna

    from vdk.plugin.ml_training.runtime import sweep_study
    from vdk.plugin.ml_training.runtime.series import facts_environment
    from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep

    sweep = Sweep(({"name": "lr", "kind": "list", "values": [0.1, 0.01]},), 2, 1, "val_loss", "min", "grid", False, 2)
    study = sweep_study.open_study(sweep, optuna.storages.InMemoryStorage())
    rests: list[Rest] = []

    def rest_of(uri, env):
        rests.append(Rest())
        return rests[-1]

    env = {mlflow_runs.TRACKING_URI: "http://mlflow:5000", **facts_environment(RunFacts(run="sweep-x", job="lr"))}
    parent = mlflow_runs.SweepParent.of(study, sweep, env, rest_of=rest_of)
    assert parent is not None and parent.mlflow_run_id == "run-1"
    assert study.user_attrs[mlflow_runs.PARENT_ATTR] == "run-1"  # where each trial pod finds it
    _, created, params = rests[0].calls[:3]
    assert created[1:3] == ("7", "sweep-x") and params[3]["sweep.metric"] == "val_loss"
    again = mlflow_runs.SweepParent.of(study, sweep, env, rest_of=rest_of)  # a restarted study pod
    assert again is not None and again.mlflow_run_id == "run-1" and rests[1].calls == []
    snapshot = {"trials": [{"number": 0, "metric": 0.3}, {"number": 1, "metric": 0.2}], "best": 1}
    again.end(snapshot, "val_loss", stopped=False)
    assert rests[1].logged() == [("best_val_loss", 0.2, 0)] and rests[1].calls[-1] == ("end", "run-1", "FINISHED")
    assert mlflow_runs.SweepParent.of(study, sweep, {}) is None  # no tracking server: no run


def test_a_trial_pod_hands_the_sweeps_mlflow_run_to_its_training():
    from vdk.plugin.ml_training.runtime import sweep_trial
    from vdk.plugin.ml_training.runtime.sweep_protocol import Sweep

    sweep = Sweep(({"name": "lr", "kind": "list", "values": [0.1]},), 1, 1, "loss", "min", "grid", False, 2)
    env = sweep_trial.trial_environment({"A": "${lr}"}, {"lr": 0.1}, "/tmp/m", sweep, 0, "run-1")
    assert env[protocol.MLFLOW_PARENT] == "run-1" and env["A"] == "0.1"
    assert protocol.MLFLOW_PARENT not in sweep_trial.trial_environment({}, {"lr": 0.1}, "/tmp/m", sweep, 0)
    from vdk.plugin.ml_training.runtime.series import facts_environment
    from vdk.plugin.ml_training.runtime.series import read_facts

    named = sweep_trial.trial_environment(facts_environment(RunFacts(run="lr-abc", job="lr")), {}, "/m", sweep, 3)
    assert (read_facts(named).run, read_facts(named).job) == ("lr-abc-trial-3", "lr")  # each trial its own name
