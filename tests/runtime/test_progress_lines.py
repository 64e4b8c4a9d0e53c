"""Progress lines from inside real training processes: printed by global rank 0 of cluster-style runs
(the bootstrap without the local launcher) and full local runs, on the first optimizer step, then at
most every VDK_ML_TRAINING_PROGRESS_SECONDS, and when the script ends; step counts are the optimizer
steps, the total comes from a HF Trainer or VDK_ML_TRAINING_TOTAL_STEPS; `vdk show`'s parser reads
them back; smoke runs print none; a failing reporter never fails the script."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import shutil
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

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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


@pytest.mark.slow
def test_rank_0_reports_at_most_every_period_with_the_optimizer_steps_and_their_loss(tmp_path):
    period = 0.3
    done = bootstrap(
        tmp_path,
        LOOP,
        {"VDK_ML_TRAINING_PROGRESS_SECONDS": str(period), "VDK_ML_TRAINING_TOTAL_STEPS": "1000", "RANK": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("[vdk-ml-training]") == 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["torch_before"] is False  # the script imports torch itself, after setting its environment
    lines = parsed_lines(done.stdout)
    *periodic, final = lines
    steps = [p.step for p in periodic]

    assert steps[0] == 1 and steps == sorted(set(steps)) and len(steps) >= 3
    at = [seen["times"][s - 1] for s in steps]  # when the script saw each reported step end
    tolerance = 0.05
    for (_, t_before), (after, t_after) in itertools.pairwise(zip(steps, at, strict=True)):
        assert t_after - t_before >= period - tolerance  # at most every period...
        assert seen["times"][after - 2] - t_before < period + tolerance  # ...and at the first step due
    for p in lines:
        assert p.loss == pytest.approx(seen["losses"][p.step - 1], rel=1e-5)
        assert p.total_steps == 1000
    for p in periodic[1:]:
        rate = float(p.fields["steps_per_s"])
        assert 1 < rate < 10.5  # a step takes at least 0.1 s
        assert seconds(p.eta) == pytest.approx((1000 - p.step) / rate, abs=2)
    assert "eta" not in periodic[0].fields  # no rate after one step

    assert (final.step, final.fields["script"], final.eta) == (12, "finished", None)
    assert done.stdout.index("the script's own output") < done.stdout.index("script=finished")


@pytest.mark.slow
def test_other_ranks_print_no_lines(tmp_path):
    script = "import torch\nm = torch.nn.Linear(1, 1)\no = torch.optim.SGD(m.parameters())\n"
    script += "m(torch.ones(1)).sum().backward(); o.step()\nprint('stepped')\n"
    done = bootstrap(tmp_path, script, {"RANK": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stepped\n" and MARK not in done.stderr


def test_a_period_of_0_turns_progress_lines_off():
    assert progress_lines.start(progress_lines.ProgressSettings({"VDK_ML_TRAINING_PROGRESS_SECONDS": "0"})) is None


@pytest.mark.slow
def test_a_failing_script_gets_a_last_line_and_fails_as_under_python(tmp_path):
    # Mixed precision with two optimizers on one backward: the loss is the one before GradScaler
    # multiplied it, an iteration is one step.
    script = """
        import json, torch
        body, head = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        opt_body = torch.optim.SGD(body.parameters(), lr=0.1)
        opt_head = torch.optim.SGD(head.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        losses = []
        for step in range(3):
            loss = head(body(torch.ones(4, 2))).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt_body); scaler.step(opt_head); scaler.update()
            opt_body.zero_grad(); opt_head.zero_grad()
            losses.append(loss.item())
        json.dump(losses, open("losses.json", "w"))
        raise RuntimeError("diverged")
    """
    done = bootstrap(tmp_path, script, {"VDK_ML_TRAINING_PROGRESS_SECONDS": "30"})
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("RuntimeError: diverged")
    lines = parsed_lines(done.stdout)
    assert [(p.step, p.fields.get("script")) for p in lines] == [(1, None), (3, "failed")]
    losses = json.loads((tmp_path / "losses.json").read_text())
    assert [p.loss for p in lines] == pytest.approx([losses[0], losses[2]], rel=1e-5)  # not 1024 times them


@pytest.mark.slow
def test_an_error_in_the_reporter_turns_it_off_with_one_warning_and_training_goes_on(tmp_path):
    # The script closes the stdout the reporter writes to: the next line fails.
    script = """
        import sys, time, torch
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            model(torch.ones(2)).sum().backward()
            optimizer.step()
            if step == 1:
                sys.stdout.flush()
                sys.stdout.close()
            time.sleep(0.05)
        open("finished", "w").write(str(step + 1))
    """
    done = bootstrap(tmp_path, script, {"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.01"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "finished").read_text() == "6"
    assert [p.step for p in parsed_lines(done.stdout)] == [1, 2]
    warnings = [line for line in done.stderr.splitlines() if "[vdk-ml-training]" in line]
    assert len(warnings) == 1 and "progress lines are off" in warnings[0] and "ValueError" in warnings[0]


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


@pytest.mark.slow
def test_a_full_ddp_run_reports_from_rank_0_only(tmp_path):
    job = write_job(
        tmp_path,
        "ddp",
        ml="gpus_per_node = 0\nprocs_per_node = 2\n",
        env="VDK_ML_TRAINING_PROGRESS_SECONDS = 0.3\nVDK_ML_TRAINING_TOTAL_STEPS = 10\n",
        files={"train.py": DDP_LOOP},
    )
    output, run_dir = full_run(job)

    *periodic, final = parsed_lines(output)
    lines = [*periodic, final]
    assert periodic[0].step == 1 and [p.step for p in periodic] == sorted({p.step for p in periodic})
    assert 2 <= len(periodic) <= 5  # the first step, then every 0.3 s of about 1 s
    assert all(p.total_steps == 10 for p in lines)
    assert (final.step, final.fields["script"]) == (10, "finished")
    assert "rank 0: 10 steps" in output and "rank 1: 10 steps" in output
    assert f"last progress: {final.describe()}" in output
    rank_1 = (run_dir / "rank-1.log").read_text()
    assert "rank 1 done" in rank_1 and MARK not in rank_1
    shutil.rmtree(run_dir)


@pytest.mark.slow
def test_a_full_run_of_the_hf_trainer_example_knows_its_total_from_the_trainer(tmp_path, monkeypatch):
    job = tmp_path / "hf-trainer"
    shutil.copytree(EXAMPLES / "hf-trainer", job)
    monkeypatch.setenv("VDK_ML_TRAINING_PROGRESS_SECONDS", "0.5")  # from the shell, for a local run
    output, run_dir = full_run(job)

    lines = parsed_lines(output)
    steps = int(re.search(r"rank 0: (\d+) steps", output).group(1))
    assert steps > 10 and len(lines) >= 3
    assert lines[0].step == 1 and all(p.total_steps == steps for p in lines)  # max_steps, before step 1
    assert all(0 < p.loss < 2 for p in lines)  # a 2-class cross-entropy
    assert [p.eta is not None for p in lines] == [False] + [True] * (len(lines) - 2) + [False]
    assert (lines[-1].step, lines[-1].fields["script"]) == (steps, "finished")
    assert MARK not in (run_dir / "rank-1.log").read_text()
    shutil.rmtree(run_dir)


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


@pytest.mark.slow
def test_in_an_image_the_first_spawned_worker_reports_progress(tmp_path):
    env = {"RANK": "0", "VDK_ML_TRAINING_PROGRESS_SECONDS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    done = bootstrap(tmp_path, SPAWNS_WORKERS, env)
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 2 done, own store" in done.stdout and "worker 1 of 2 done, own store" in done.stdout
    assert parsed_lines(done.stdout) == []  # a period of 0: none

    env["VDK_ML_TRAINING_PROGRESS_SECONDS"] = "30"
    done = bootstrap(tmp_path, SPAWNS_WORKERS, env)
    assert done.returncode == 0, done.stderr
    lines = parsed_lines(done.stdout)
    assert [(p.step, p.fields.get("script")) for p in lines] == [(1, None), (6, "finished")]  # worker 0's only
