"""Progress lines without a process: the line the runtime prints is what `vdk show` reads back, durations
are short, the settings come from the environment or the job config, the reporter stepped by hand on a
clock reports the first step, then at most every period, and the end (with the time after the last
step, left as termination message), the loss curve, and a period of 0 starts no reporter. (Real
training processes: tests/integration/runtime/test_progress_lines_ranks.py.)"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime.progress_lines import MARK
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress

# --- the line format --------------------------------------------------------------------------


def test_what_the_runtime_prints_is_what_vdk_show_reads():
    line = progress_lines.format_line(120, 1000, 0.431215, 2.3456, 51.2, 374.9)
    assert line == f"{MARK} step=120/1000 loss=0.431215 steps_per_s=2.35 elapsed=51s eta=6m14s"
    read = parse_progress(["2026-01-02T03:04:05Z " + line])
    assert (read.step, read.total_steps, read.loss, read.eta) == (120, 1000, 0.431215, "6m14s")
    assert read.describe() == "step 120/1000, loss 0.4312, ETA 6m14s, 2.35 steps/s, elapsed 51s"

    final = parse_progress([progress_lines.format_line(7, None, float("nan"), 1234.5, 3725, None, "failed")])
    assert (final.step, final.total_steps, final.eta) == (7, None, None) and math.isnan(final.loss)
    assert final.describe() == "step 7, loss nan, 1234 steps/s, elapsed 1h2m, script failed"
    assert parse_progress([progress_lines.format_line(1)]).describe() == "step 1"


def test_progress_is_the_last_reported_line():
    lines = [
        "[vdk-ml-training] progress step=10 total_steps=1000 loss=2.5 eta=2h",
        "epoch 1 done",
        "2026-01-02 rank0 [vdk-ml-training] progress step=120 total_steps=1000 loss=0.43121 eta_s=2100 lr=3e-4",
        "some other line",
    ]
    last = parse_progress(lines)
    assert (last.step, last.total_steps, last.loss, last.eta) == (120, 1000, 0.43121, "35m")
    assert last.describe() == "step 120/1000, loss 0.4312, ETA 35m, lr 3e-4"
    short = parse_progress(["[vdk-ml-training] progress step=7/50 loss=nan"])
    assert (short.step, short.total_steps, short.eta) == (7, 50, None)
    assert parse_progress(["no progress here"]) is None


@pytest.mark.parametrize(
    "value, text",
    [(0, "0s"), (59.9, "59s"), (95, "1m35s"), (725, "12m"), (3600, "1h"), (3725, "1h2m"), (90000, "1d1h")],
)
def test_durations_are_short_and_readable(value, text):
    assert progress_lines.approximate_duration(value) == text


def test_settings_come_from_the_environment_and_bad_values_are_named():
    good = progress_lines.ProgressSettings(
        {"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.5", "VDK_ML_TRAINING_TOTAL_STEPS": "900"}
    )
    assert (good.period, good.total_steps, good.problems) == (0.5, 900, [])
    default = progress_lines.ProgressSettings({})
    assert (default.period, default.total_steps) == (progress_lines.DEFAULT_PERIOD_SECONDS, None)
    bad = progress_lines.ProgressSettings(
        {"VDK_ML_TRAINING_PROGRESS_SECONDS": "-1", "VDK_ML_TRAINING_TOTAL_STEPS": "1e3"}
    )
    assert (bad.period, bad.total_steps) == (progress_lines.DEFAULT_PERIOD_SECONDS, None)
    named = [problem.split("=")[0] for problem in bad.problems]
    assert named == ["VDK_ML_TRAINING_PROGRESS_SECONDS", "VDK_ML_TRAINING_TOTAL_STEPS"]


class Steps:
    """What the reporter reads of a StepCounter, stepped by hand."""

    def __init__(self):
        self.steps, self.listeners, self.value = 0, [], None

    def loss(self):
        return self.value

    def step(self, loss: float):
        self.steps, self.value = self.steps + 1, loss
        for listener in list(self.listeners):
            listener(self, None)


def test_the_reporter_reports_the_first_step_then_the_first_step_due_and_the_end():
    now = [100.0]
    out = io.StringIO()
    counter = Steps()
    reporter = progress_lines.ProgressReporter(period=10, total_steps=None, out=out, clock=lambda: now[0]).attach(
        counter
    )
    reporter.set_total(1000, done=400)  # a Trainer resumed at step 400 of 1000
    for _ in range(30):  # 30 steps, 1 s each
        now[0] += 1
        counter.step(loss=now[0] / 1000)
    reporter.finish("finished")

    lines = [parse_progress([line]) for line in out.getvalue().splitlines()]
    assert [(p.step, p.loss) for p in lines] == [(401, 0.101), (411, 0.111), (421, 0.121), (430, 0.13)]
    assert [p.fields.get("steps_per_s") for p in lines] == [None, "1", "1", "1"]
    assert [p.eta for p in lines] == [None, "9m49s", "9m39s", None]
    assert [p.fields["elapsed"] for p in lines] == ["1s", "11s", "21s", "30s"]
    assert lines[-1].fields["script"] == "finished" and reporter.last_line == lines[-1].line

    assert lines[-1].after_last_step_seconds == 0  # it ended right after its last step

    idle = progress_lines.ProgressReporter(out=out).attach(Steps())
    idle.finish("finished")  # never stepped: no line
    assert out.getvalue().count(MARK) == 4


def test_the_last_line_says_how_long_the_script_ran_after_its_last_step_and_is_left_as_termination_message(
    tmp_path, monkeypatch
):
    message = tmp_path / "termination-log"
    message.write_text("")
    monkeypatch.setattr(termination, "PATH", str(message))
    now, out, counter = [0.0], io.StringIO(), Steps()
    reporter = progress_lines.ProgressReporter(period=30, out=out, clock=lambda: now[0]).attach(counter)
    counter.step(loss=0.5)
    now[0] += 725  # a final evaluation and a checkpoint, with no optimizer step
    reporter.finish("finished")
    last = parse_progress(out.getvalue().splitlines())
    assert last.fields["after_last_step"] == "12m" and last.after_last_step_seconds == 720
    assert last.describe() == "step 1, loss 0.5, elapsed 12m, script finished, after the last step 12m"
    assert parse_progress(message.read_text().splitlines()) == last  # what `vdk list --usage` reads


def test_the_loss_curve_is_every_progress_line_with_a_step_and_a_loss():
    lines = [
        progress_lines.format_line(1, 100, 2.5),
        "epoch 1",
        progress_lines.format_line(40, 100, 1.25),
        progress_lines.format_line(60, 100),  # no loss
        "2026-01-02 " + progress_lines.format_line(80, 100, float("nan")),
        progress_lines.format_line(100, 100, 0.75, script="finished"),
    ]
    curve = progress_lines.loss_curve(lines)
    assert [step for step, _ in curve] == [1, 40, 80, 100]
    assert curve[0][1] == 2.5 and math.isnan(curve[2][1]) and curve[3][1] == 0.75


def test_the_job_config_may_set_the_progress_settings_and_no_other_plugin_variable(tmp_path):
    def job(env: str) -> Path:
        return write_job(tmp_path, env=env, files={"train.py": ""})

    spec = load_job_spec(job("VDK_ML_TRAINING_PROGRESS_SECONDS = 10\nVDK_ML_TRAINING_TOTAL_STEPS = 5000"))
    assert spec.env_dict == {"VDK_ML_TRAINING_PROGRESS_SECONDS": "10", "VDK_ML_TRAINING_TOTAL_STEPS": "5000"}
    with pytest.raises(JobConfigError, match="VDK_ML_TRAINING_TOTAL_STEPS='many' is not a number >= 1"):
        load_job_spec(job("VDK_ML_TRAINING_TOTAL_STEPS = many"))
    with pytest.raises(JobConfigError, match="VDK_ML_TRAINING_MODE is not a setting the training processes read"):
        load_job_spec(job("VDK_ML_TRAINING_MODE = full"))


def test_a_period_of_0_turns_progress_lines_off():
    assert progress_lines.start(progress_lines.ProgressSettings({"VDK_ML_TRAINING_PROGRESS_SECONDS": "0"})) is None


def test_the_reporter_s_followers_get_each_line_s_figures_and_are_closed_at_the_end():
    class Follower:
        def __init__(self):
            self.offered, self.closed = [], 0

        def offer(self, figures):
            self.offered.append(figures)

        def close(self):
            self.closed += 1

    now, out, counter = [0.0], io.StringIO(), Steps()
    reporter = progress_lines.ProgressReporter(period=10, total_steps=100, out=out, clock=lambda: now[0])
    follower = Follower()
    reporter.followers.append(follower)
    reporter.attach(counter)
    for _ in range(15):
        now[0] += 1
        counter.step(loss=0.5)
    reporter.finish("finished")
    # the figures of each line, as the line says them
    assert [f.line() for f in follower.offered] == out.getvalue().splitlines()
    assert [(f.step, f.script) for f in follower.offered] == [(1, None), (11, None), (15, "finished")]
    assert follower.closed == 1
    idle, never = progress_lines.ProgressReporter(out=out).attach(Steps()), Follower()
    idle.followers.append(never)
    idle.finish("failed")  # no step, no line: closed all the same
    assert (never.offered, never.closed) == ([], 1)


def test_after_a_framework_resumed_lines_count_from_its_step_and_say_where_it_resumed():
    now, out, counter = [0.0], io.StringIO(), Steps()
    reporter = progress_lines.ProgressReporter(period=0, out=out, clock=lambda: now[0]).attach(counter)
    progress_lines.note_resumed("on-stop-step=1200.ckpt", 1200)  # Lightning: no total, its global step
    counter.step(loss=0.25)
    reporter.finish("finished")
    last = parse_progress(out.getvalue().splitlines())
    assert last.step == 1201 and last.fields["resumed"] == "on-stop-step=1200.ckpt@1200"
    # what `vdk show` says of the run's last progress line
    assert last.describe().endswith("resumed from on-stop-step=1200.ckpt (step 1200)")


def test_a_progress_line_and_a_kubeflow_status_take_their_figures_the_same_way():
    from vdk.plugin.ml_training.runtime.kubeflow_status import parse_trainer_status

    line = parse_progress([f"{MARK} step=7/n/a loss=nan eta=1.5"])
    status = parse_trainer_status(
        {
            "progressPercentage": True,  # a JSON true is no percentage
            "metrics": [
                {"name": "current_step", "value": "7"},
                {"name": "total_steps", "value": "n/a"},
                {"name": "loss", "value": "nan"},
            ],
        }
    )
    for progress in (line, status):
        assert progress.step == 7 and progress.total_steps is None and math.isnan(progress.loss)
    assert status.percent is None
    assert progress_lines.as_int("1.5") is None and progress_lines.as_int(None) is None
    assert progress_lines.as_float("1.5") == 1.5 and progress_lines.as_float("") is None
    assert progress_lines.loss_curve([f"{MARK} step=3/10 loss=0.5", f"{MARK} step=4", "step=5 loss=1"]) == [(3, 0.5)]
