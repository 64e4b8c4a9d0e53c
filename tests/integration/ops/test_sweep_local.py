"""A sweep on this machine: its smoke check (every trial's arguments through the script's own parser, the extreme
trials' smoke steps and the metric they report) and `vdk run --full` (its trials one after another on Optuna),
with real torch processes; `run_job` of a sweep's job does what `vdk run` does (the smoke check, or with `full`
the trials)."""

from __future__ import annotations

import re
import signal
import tempfile
import threading

import pytest

from tests.support.jobs import write_job
from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark
from tests.support.processes import wait_for_files
from tests.support.recorder import Recorder
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.local_run import run_job
from vdk.plugin.ml_training.ops.sweep_local import LocalSweep
from vdk.plugin.ml_training.ops.sweep_smoke import SweepSmoke
from vdk.plugin.ml_training.ops.sweep_smoke import smoke_check_sweep

pytestmark = pytest.mark.usefixtures("isolated_environment")

TRAIN = """
import argparse, math, time
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--optimizer", choices=["adam", "sgd"], default="sgd")
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    loss = model(torch.randn(4, 2)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: val_score: {(math.log10(args.lr) + 3) ** 2 + 1 / (step + 1):.5f}", flush=True)
    time.sleep(0.1)
"""


def job(tmp_path, sweep: str, args: str = "--lr ${lr} --optimizer ${opt}", name="lr-local"):
    return write_job(
        tmp_path,
        name,
        ml={"args": args, "gpus_per_node": "0"},
        env={"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.3"},
        extra=f"\n[ml-training.sweep]\n{sweep}",
        files={"train.py": TRAIN},
    )


def test_the_smoke_check_finds_the_one_trial_whose_arguments_the_script_refuses(tmp_path, monkeypatch):
    spec = load_job_spec(job(tmp_path, "lr = 1e-4, 1e-2\nopt = adam, adamw, sgd\nmetric = val_score\n"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = smoke_check_sweep(spec)
    # the argument check's folders and the trials' metric files are gone (torch's own compile cache may stay)
    assert [p for p in temporary.iterdir() if not p.name.startswith("torchinductor_")] == []
    assert [t.arguments for t in result.trials].count("refused") == 2  # adamw, with each lr
    refused = next(t for t in result.trials if t.arguments == "refused")
    assert refused.params["opt"] == "adamw" and "invalid choice: 'adamw'" in refused.message
    assert not result.passed and "adamw" in result.error.problem and "2 of 6 trials" in result.error.problem
    extremes = [t for t in result.trials if t.smoke]
    assert [t.smoke for t in extremes] == ["passed", "passed"]  # adam and sgd, the first and last choices
    assert all(t.metric is not None for t in extremes)


def test_a_metric_the_script_never_reports_is_named_with_those_it_does(tmp_path):
    spec = load_job_spec(job(tmp_path, "lr = 1e-4, 1e-2\nopt = adam, sgd\nmetric = eval_loss\n"))
    told = Recorder()
    result = run_job(spec, reporter=told)  # as `vdk run` runs a sweep's job: its smoke check
    assert isinstance(result, SweepSmoke)
    assert told.notes[0].startswith("Smoke check of the sweep of lr-local: the arguments of its 4 trials")
    assert told.named("run_starting") == []  # the extremes' runs are the check's own, in threads: not told
    assert all(t.arguments == "accepted" for t in result.trials)
    assert not result.passed
    assert "never reported the sweep's metric eval_loss" in result.error.problem
    assert "val_score" in result.error.problem  # what it does print


def test_vdk_run_shows_the_checked_trials_and_passes(tmp_path):
    path = job(tmp_path, "lr = loguniform(1e-5, 1e-1)\nopt = adam, sgd\ntrials = 8\nmetric = val_score\n")
    done = vdk("run", str(path))
    assert done.exit_code == 0, done.output
    assert "Smoke check passed: 8 trials' arguments accepted" in done.stdout
    assert done.stdout.count("accepted") >= 8 and done.stdout.count("passed") >= 2


def test_a_full_local_sweep_runs_its_trials_one_after_another_finds_the_best_and_prunes_the_hopeless(tmp_path):
    steps = 40  # 4 s a trial: a hopeless one is judged at its first report, a poll (1 s) after it
    sweep = "lr = 1e-3, 1e-5, 1e-1\ntrials = 3\nmetric = val_score\nseed = 1\n"
    spec = load_job_spec(job(tmp_path, sweep, args=f"--lr ${{lr}} --steps {steps}"))
    told = Recorder()
    local = run_job(spec, full=True, reporter=told)  # as `vdk run --full` runs a sweep's job: its trials in full
    assert isinstance(local, LocalSweep) and local.passed and local.error is None
    assert told.notes[0] == "Sweep of lr-local: 3 trials on this machine, one after another"
    assert any(n.startswith("trial 0: lr=") for n in told.notes)  # each trial's values, then how it ended
    ended = [n for n in told.notes if re.fullmatch(r"trial \d (complete|pruned at step \d+ .*) \(\d of 3\)", n)]
    assert len(ended) == 3, told.notes
    # a pruned trial is the sweep working: one line that says so, no summary of a stopped run, no diagnosis of it
    # as a crash (it said "died without a Python error ... often the out-of-memory killer", with a stack)
    for note in ended[1:]:
        assert re.match(r"trial \d pruned at step \d+ \(val_score [\d.]+\): the pruner stopped it", note), note
    assert len(told.named("run_starting")) == 3 and len(told.named("run_ended")) == 1  # each trial a full run
    assert all(result.passed for (result,) in told.named("run_ended"))
    trials = local.snapshot["trials"]
    assert len(trials) == 3 and local.study.is_file()
    # seed 1 runs lr=1e-3 first: the two after it are worse than it whatever steps each reported at
    assert [(t["params"]["lr"], t["state"]) for t in trials] == [(1e-3, "complete"), (1e-1, "pruned"), (1e-5, "pruned")]
    best = next(t for t in trials if t["number"] == local.snapshot["best"])
    assert best["params"] == {"lr": 0.001} and best["steps"] == steps
    assert local.table.best is not None and local.table.best.params == {"lr": 0.001}
    assert all(t["steps"] < steps for t in trials if t["state"] == "pruned")  # stopped before their end


# Parses its arguments, says it runs, and waits in its first step: only stopping it ends the run.
HANGS = """
import argparse, os, time
from pathlib import Path
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
Path(os.environ["READY_DIR"], str(os.getpid())).write_text("")
time.sleep(600)
"""


def test_a_signal_during_the_smoke_check_stops_the_extreme_trials_runs(tmp_path):
    """The extremes run in threads of their own, and a signal reaches the main thread only: their runs must stop
    with it, not go on until their smoke timeout (a notebook's Ctrl-C; `vdk` itself would exit)."""
    mark, ready = new_mark(), tmp_path / "ready"
    ready.mkdir()
    path = write_job(
        tmp_path,
        "hangs",
        ml={"args": "--lr ${lr}", "gpus_per_node": "0", "smoke_timeout": "5m"},
        env={MARK: mark, "READY_DIR": str(ready)},
        extra="\n[ml-training.sweep]\nlr = 1e-4, 1e-2\nmetric = val_score\n",
        files={"train.py": HANGS},
    )
    spec = load_job_spec(path)
    started = []

    def interrupt_once_both_run() -> None:
        started.append(wait_for_files(ready, "*", 2, seconds=240))
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    with pytest.raises(interrupts.Interrupted), interrupts.stop_on_signals():
        smoke_check_sweep(spec)
    assert started == [True]
    assert left_after(mark, 15) == []  # both trials' ranks and torchrun agents


def test_a_smoke_trial_trains_on_until_its_metric_is_first_reported(tmp_path):
    # the metric every 5 steps, smoke_steps 2 (the default): the trial goes on past them until the first report
    script = TRAIN.replace('    print(f"step', '    if step % 5 == 4:\n        print(f"step')
    path = write_job(
        tmp_path,
        "every-5",
        ml={"args": "--lr ${lr}", "gpus_per_node": "0", "smoke_steps": "2"},
        extra="\n[ml-training.sweep]\nlr = 1e-4, 1e-2\nmetric = val_score\n",
        files={"train.py": script},
    )
    result = run_job(load_job_spec(path), reporter=Recorder())
    assert isinstance(result, SweepSmoke)
    assert result.passed, result.error
