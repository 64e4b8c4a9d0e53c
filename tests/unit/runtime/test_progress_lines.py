"""Progress lines from inside real training processes: printed by global rank 0 of cluster-style runs
(the bootstrap without the local launcher) and full local runs, on the first optimizer step, then at
most every VDK_ML_TRAINING_PROGRESS_SECONDS, and when the script ends; step counts are the optimizer
steps, the total comes from a HF Trainer or VDK_ML_TRAINING_TOTAL_STEPS; `vdk show`'s parser reads
them back; smoke runs print none; a failing reporter never fails the script."""

from __future__ import annotations

import io
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime.progress_lines import MARK
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"


def bootstrap(cwd: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The bootstrap as a job image runs it (no local launcher), on `script`."""
    (cwd / "train.py").write_text(textwrap.dedent(script))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") and k != "RANK"}
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, "train.py"],
        cwd=cwd,
        env={**clean, "CUDA_VISIBLE_DEVICES": "", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def parsed_lines(text: str) -> list:
    return [parse_progress([line]) for line in text.splitlines() if MARK in line]


def seconds(human: str) -> int:
    """'1m41s' -> 101: the inverse of progress_lines.approximate_duration, for checking ETAs."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([dhms])", human))


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


# --- in a training process as a job image runs it -----------------------------------------------

# 12 optimizer steps of two micro-batches each (gradient accumulation), 0.1 s apart. Records when
# each step ended and its loss (the sum of what backward() was called on) as the script sees them,
# and whether torch was imported before the script's own `import torch`.
LOOP = """
import json, os, sys, time
torch_before = "torch" in sys.modules
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
times, losses = [], []
for step in range(12):
    total = 0.0
    for micro in (1.0, 2.0):
        loss = model(torch.full((3, 4), micro)).pow(2).mean() / 2
        loss.backward()
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.monotonic())
    losses.append(total)
    time.sleep(0.1)
json.dump({"times": times, "losses": losses, "torch_before": torch_before}, open("seen.json", "w"))
print("the script's own output")
"""


def test_a_period_of_0_turns_progress_lines_off():
    assert progress_lines.start(progress_lines.ProgressSettings({"VDK_ML_TRAINING_PROGRESS_SECONDS": "0"})) is None


# --- local runs -------------------------------------------------------------------------------

DDP_LOOP = """
import atexit, os, time
import torch, torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10):
    model(torch.ones(4, 3) * (dist.get_rank() + 1)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.1)
print(f"rank {dist.get_rank()} done", flush=True)
# torch 2.13's gloo now and then aborts while the interpreter shuts down (1 run in ~12, under plain
# torchrun too): skip the teardown, after the bootstrap has reported, as some training scripts do.
atexit.register(os._exit, 0)
"""


def full_run(job: Path):
    result = CliEntryBasedTestRunner(plugin).invoke(["run", "--full", str(job)])
    assert result.exit_code == 0, result.output
    assert "full run PASSED" in result.output
    run_dir = Path(re.search(r"rank 1: (\S+)/rank-1\.log", result.output).group(1))
    return result.output, run_dir


# A script that spawns its workers (mp.spawn) in a job image: torchrun starts one launcher process.
SPAWNS_WORKERS = """
import os
import torch
import torch.multiprocessing as mp


def main(rank, world_size):
    # torchrun's agent-store flag would make the workers' own env:// rendezvous wait for torchrun's store
    store = "agent store" if "TORCHELASTIC_USE_AGENT_STORE" in os.environ else "own store"
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    print(f"worker {rank} of {world_size} done, {store}", flush=True)


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
"""
