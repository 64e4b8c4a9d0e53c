"""Rank 0's series (runtime/series.py): what a real step counter's steps, a script's shown values and the GPU
figures become, the training thread's share of the work, the facts of a run, and a writer that fails."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pytest
import torch

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import series
from vdk.plugin.ml_training.runtime import sweep_protocol
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts
from vdk.plugin.ml_training.runtime.series import SeriesRecorder
from vdk.plugin.ml_training.runtime.steps import StepCounter


class Kept:
    """A writer that keeps what it is given."""

    name = "the test's writer"

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.closed: list[str] = []

    def write(self, points: list[Point]) -> None:
        self.points += points

    def close(self, status: str) -> None:
        self.closed.append(status)

    def series(self, name: str) -> list[tuple[int, float]]:
        return [(p.step, p.value) for p in self.points if p.series == name]


class Broken(Kept):
    name = "a broken writer"

    def write(self, points: list[Point]) -> None:
        raise OSError("disk full")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def counter():
    counter = StepCounter().install()
    yield counter
    counter.uninstall()


def train(steps: int, clock: Clock, recorder: SeriesRecorder, lr: float = 0.1, seconds: float = 0.5) -> list[float]:
    """`steps` SGD steps, the clock `seconds` on per step, each step's loss returned; the recorder flushed each
    step (as its thread would once a period)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(8, 3)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        clock.now += seconds
        recorder._flush()
    return losses


def test_each_period_one_step_is_kept_with_its_loss_learning_rate_and_rate(counter):
    clock, kept = Clock(), Kept()
    recorder = SeriesRecorder([kept], period=1.0, clock=clock, wall=clock).attach(counter)
    losses = train(6, clock, recorder)  # 0.5 s a step, a period of 1 s: steps 1, 3, 5
    assert kept.series(series.LOSS) == [(1, pytest.approx(losses[0])), (3, pytest.approx(losses[2])),
                                        (5, pytest.approx(losses[4]))]  # fmt: skip
    assert kept.series(series.LEARNING_RATE) == [(1, 0.1), (3, 0.1), (5, 0.1)]
    assert kept.series(series.STEPS_PER_SECOND) == [(3, pytest.approx(2.0)), (5, pytest.approx(2.0))]
    clock.now += 30  # an evaluation after the loop: no step, so no part of the steps' rate
    recorder.finish(protocol.FINISHED)
    assert kept.series(series.LOSS)[-1] == (6, pytest.approx(losses[5]))  # the last step, when the script ends
    assert kept.series(series.STEPS_PER_SECOND)[-1] == (6, pytest.approx(2.0))  # up to the last step's clock
    assert kept.closed == [protocol.FINISHED]


def test_a_step_kept_while_the_series_thread_is_late_is_not_replaced_by_the_next(counter):
    """A loaded machine: the series' thread takes its points after the next period's step was kept already. Both
    steps are points (the first step's was lost so: a run's series began at step 229 instead of 1)."""
    clock, kept = Clock(), Kept()
    recorder = SeriesRecorder([kept], period=1.0, clock=clock, wall=clock).attach(counter)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):  # 0.5 s a step, no flush between: steps 1, 3 and 5 kept
        model(torch.randn(8, 3)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.now += 0.5
    recorder._flush()
    assert [step for step, _ in kept.series(series.LOSS)] == [1, 3, 5]
    assert kept.series(series.STEPS_PER_SECOND) == [(3, pytest.approx(2.0)), (5, pytest.approx(2.0))]
    recorder.finish(protocol.FINISHED)


def test_a_run_shorter_than_a_period_has_its_first_and_last_steps_with_their_rate(counter):
    """A sweep's short trial: its first step kept, then the script ends before the series' thread took it; both
    are points, with the learning rate and the rate of the steps between them (they were one, the end's, before)."""
    clock, kept = Clock(), Kept()
    recorder = SeriesRecorder([kept], period=1000.0, clock=clock, wall=clock).attach(counter)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(16):
        model(torch.randn(8, 3)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.now += 0.25
    recorder.finish(protocol.FINISHED)
    assert [step for step, _ in kept.series(series.LOSS)] == [1, 16]
    assert kept.series(series.LEARNING_RATE) == [(1, 0.05), (16, 0.05)]
    assert kept.series(series.STEPS_PER_SECOND) == [(16, pytest.approx(4.0))]


def test_between_two_periods_a_step_reads_the_clock_and_nothing_else(counter):
    clock, kept = Clock(), Kept()
    recorder = SeriesRecorder([kept], period=1000.0, clock=clock, wall=clock).attach(counter)
    train(1, clock, recorder)
    reads = []
    original = counter.loss_snapshot
    counter.loss_snapshot = lambda: reads.append(1) or original()
    train(20, clock, recorder)
    assert reads == [] and len(kept.series(series.LOSS)) == 1


def test_values_the_script_shows_are_series_at_the_step_they_were_shown(counter):
    clock, kept = Clock(), Kept()
    recorder = SeriesRecorder([kept], period=1.0, clock=clock, wall=clock).attach(counter)
    train(2, clock, recorder)
    recorder.record("val_loss", torch.tensor(0.25))
    recorder.record("val_acc", 0.9)
    recorder.record("not_a_number", "abc")
    recorder.record("infinite", float("inf"))
    recorder._flush()
    assert kept.series(series.metric_series("val_loss")) == [(2, 0.25)]
    assert kept.series(series.metric_series("val_acc")) == [(2, 0.9)]
    assert not [p for p in kept.points if "not_a_number" in p.series or "infinite" in p.series]


def test_a_script_that_prints_a_table_of_numbers_gets_a_bounded_number_of_series(counter):
    kept = Kept()
    recorder = SeriesRecorder([kept], period=1.0).attach(counter)
    for i in range(series.MAX_NAMES + 30):
        recorder.record(f"column_{i}", i)
    recorder._flush()
    assert len({p.series for p in kept.points}) == series.MAX_NAMES


@dataclass
class Figures:
    sm_now: float | None
    mem_now: int


def test_the_gpus_activity_and_memory_are_series_of_node_0(counter):
    clock, kept = Clock(), Kept()
    figures = iter([Figures(87.5, 3 << 30), Figures(None, 0)])
    recorder = SeriesRecorder([kept], period=1.0, gpus=lambda: next(figures), clock=clock, wall=clock).attach(counter)
    train(1, clock, recorder)
    recorder._flush()  # no activity readable, no memory: no points
    assert kept.series(series.GPU_ACTIVITY) == [(1, 87.5)]
    assert kept.series(series.GPU_MEMORY) == [(1, 3.0)]


def test_a_writer_that_fails_is_dropped_with_one_line_and_the_others_go_on(counter):
    clock, kept, err = Clock(), Kept(), io.StringIO()
    recorder = SeriesRecorder([Broken(), kept], period=1.0, clock=clock, wall=clock, err=err).attach(counter)
    train(4, clock, recorder)
    recorder.finish(protocol.FAILED)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "a broken writer is off" in lines[0] and "disk full" in lines[0]
    assert len(kept.series(series.LOSS)) == 3 and kept.closed == [protocol.FAILED]


def test_a_period_of_0_or_no_writer_is_no_series():
    assert series.start([Kept()], env={protocol.SERIES_SECONDS: "0"}) is None
    assert series.start([], env={}) is None
    assert series.SeriesSettings.from_env({protocol.SERIES_SECONDS: "-1"}).problems


def test_the_facts_of_a_trial_come_from_its_variables():
    facts = RunFacts(job="spirals", team="vision", commit="abc", config={"args": "--lr 1"}, datasets={"data": "v1"})
    env = {
        **series.facts_environment(facts),
        sweep_protocol.TRIAL_PARAMS: json.dumps({"lr": 0.01, "opt": "adam"}),
        sweep_protocol.METRIC: "val_loss",
        protocol.MLFLOW_PARENT: "parent-run",
        protocol.RUN_DIR: "/runs/full/spirals-20260101-120000-abcdefgh/",
    }
    read = series.read_facts(env)
    assert (read.job, read.team, read.commit, read.config, read.datasets) == (
        "spirals", "vision", "abc", {"args": "--lr 1"}, {"data": "v1"}
    )  # fmt: skip
    assert read.params == {"lr": 0.01, "opt": "adam"} and read.metric == "val_loss" and read.parent == "parent-run"
    assert read.run == "spirals-20260101-120000-abcdefgh"  # a local run's name: its directory's
    assert series.read_facts({protocol.RUN_FACTS: "{not json"}) == RunFacts()


def test_a_shown_value_is_a_number_the_same_way_for_the_series_and_a_sweep_s_metric():
    from vdk.plugin.ml_training.runtime.metrics import shown_number

    assert shown_number(torch.tensor(0.25)) == 0.25 and shown_number(3) == 3.0 and shown_number("0.5") == 0.5
    assert shown_number(torch.tensor([1.0, 2.0])) is None  # several values: no one number
    assert shown_number("abc") is None and shown_number(None) is None
