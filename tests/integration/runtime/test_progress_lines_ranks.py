"""Progress lines from inside real training processes: printed by global rank 0 of cluster-style runs
(the bootstrap without the local launcher, spawned workers in an image) and full local runs, on the
first optimizer step, then at most every VDK_ML_TRAINING_PROGRESS_SECONDS, and when the script ends;
step counts are the optimizer steps, the total comes from a HF Trainer or VDK_ML_TRAINING_TOTAL_STEPS;
other ranks print none; a failing reporter never fails the script. (The line format, its parser and
the reporter stepped by hand: tests/unit/runtime/test_progress_lines.py.)"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.bootstrap_runs import bootstrap_script
from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.runtime.progress_lines import MARK
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def parsed_lines(text: str) -> list:
    return [parse_progress([line]) for line in text.splitlines() if MARK in line]


def seconds(human: str) -> int:
    """'1m41s' -> 101: the inverse of progress_lines.approximate_duration, for checking ETAs."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([dhms])", human))


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
    done = bootstrap_script(
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
    done = bootstrap_script(tmp_path, script, {"RANK": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stepped\n" and MARK not in done.stderr


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
    done = bootstrap_script(tmp_path, script, {"VDK_ML_TRAINING_PROGRESS_SECONDS": "30"})
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
    done = bootstrap_script(tmp_path, script, {"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.01"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "finished").read_text() == "6"
    assert [p.step for p in parsed_lines(done.stdout)] == [1, 2]
    warnings = [line for line in done.stderr.splitlines() if "[vdk-ml-training]" in line]
    assert len(warnings) == 1 and "progress lines are off" in warnings[0] and "ValueError" in warnings[0]


# --- local runs -------------------------------------------------------------------------------

DDP_LOOP = """
import time
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
def test_in_an_image_the_first_spawned_worker_reports_progress(tmp_path, trainer_status_server):
    env = {"RANK": "0", "VDK_ML_TRAINING_PROGRESS_SECONDS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    done = bootstrap_script(tmp_path, SPAWNS_WORKERS, env)
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 2 done, own store" in done.stdout and "worker 1 of 2 done, own store" in done.stdout
    assert parsed_lines(done.stdout) == []  # a period of 0: none

    env["VDK_ML_TRAINING_PROGRESS_SECONDS"] = "30"
    status = trainer_status_server()  # a TrainJob's Kubeflow status: posted by the worker that prints the lines
    done = bootstrap_script(tmp_path, SPAWNS_WORKERS, {**env, **status.env()})
    assert done.returncode == 0, done.stderr
    lines = parsed_lines(done.stdout)
    assert [(p.step, p.fields.get("script")) for p in lines] == [(1, None), (6, "finished")]  # worker 0's only
    posted = [{m["name"]: m["value"] for m in s["metrics"]} for s in status.accepted()]
    # the last, and before it the first step's unless the end came first (six steps take milliseconds)
    assert [(m["current_step"], m.get("script")) for m in posted][-1] == ("6", "finished")
    assert {m["current_step"] for m in posted} <= {"1", "6"}
