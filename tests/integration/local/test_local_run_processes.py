"""`vdk run` of ml-training jobs with real torch, transformers, torchrun and processes: the examples
pass after exactly smoke_steps steps per rank; failures, crashes, hangs and Ctrl-C end every process
and show the root cause once; data jobs run as before; `--full` trains to completion."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.ddp_scripts import steps_then_hangs
from tests.support.jobs import write_job
from tests.support.processes import MARK as PROCESS_MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark
from tests.support.vdk_cli import smoke_run
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.cli.local_summary import format_start
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.launch_plan import FORK
from vdk.plugin.ml_training.local.launch_plan import SPAWN
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.progress_lines import MARK
from vdk.plugin.ml_training.units import format_duration

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RANK_LINE = re.compile(r"rank (\d+): (\d+) steps?, .*(?:stopped as planned|the script ended)")
WORK_DIR = re.compile(r"working directory: (\S+)")


def make_job(root: Path, name: str, script: str, ml: str = "", env: str = "") -> Path:
    """A job whose train.py is `script`; `ml` and `env` as written in config.ini (dedented)."""
    files = {"train.py": textwrap.dedent(script)}
    return write_job(root, name, ml=textwrap.dedent(ml), env=textwrap.dedent(env), files=files)


# A DDP loop of 5 steps on 2 ranks fed by DataLoader workers (whose feeder threads are in every
# rank's stack dump); `{inject}` runs on rank 1 before its first optimizer step.
DDP_LOOP = """
import os, signal, sys, time
from pathlib import Path
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def note_worker(worker):
    Path(os.environ["PID_DIR"], f"{{rank}}-{{worker}}.worker").write_text(str(os.getpid()))

dist.init_process_group("nccl")
rank = dist.get_rank()
Path(os.environ["PID_DIR"], f"{{rank}}.pid").write_text(str(os.getpid()))
model = DDP(torch.nn.Linear(4, 1).to(rank), device_ids=[rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.ones(20, 4))
loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, worker_init_fn=note_worker)
for step, (x,) in zip(range(5), loader):
    loss = model(x.to(rank)).pow(2).mean()
    loss.backward()
    if {condition}:
        {inject}
    optimizer.step()
"""


def ddp_job(root: Path, name: str, inject: str, condition: str = "rank == 1", ml: str = "") -> tuple[Path, Path]:
    pids = root / f"{name}-pids"
    pids.mkdir()
    script = DDP_LOOP.format(inject=inject, condition=condition)
    job = make_job(root, name, script, "nodes = 2\ngpus_per_node = 1\nsmoke_steps = 2\n" + ml, f"PID_DIR = {pids}\n")
    return job, pids


def stack_shows(out: str, header: str, job: Path, line: int) -> bool:
    """`header`, then the stack lines below it, among them the job's train.py at `line`."""
    frame = rf'  File "{re.escape(str(job))}/train.py", line {line} in'
    return re.search(rf"{re.escape(header)}\n(  (File .*|\.\.\.)\n)*{frame}", out) is not None


def no_fifo_left(runs: Path) -> bool:
    return not [p for p in runs.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode)]


def line_of(job: Path, text: str) -> int:
    return next(i for i, line in enumerate((job / "train.py").read_text().splitlines(), 1) if text in line)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def assert_all_gone(pid_dir: Path, expected: int) -> None:
    """The ranks, and the DataLoader workers they started, are gone."""
    pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert len(pids) == expected
    pids += [int(p.read_text()) for p in pid_dir.glob("*.worker")]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]


@pytest.mark.parametrize("example", ["ddp-nccl", "hf-trainer", "single-gpu-loop"])
def test_each_example_passes_after_exactly_smoke_steps_per_rank(example, monkeypatch):
    spec = load_job_spec(EXAMPLES / example)
    monkeypatch.setenv(protocol.PROGRESS_SECONDS, "0.001")  # reaches the ranks; smoke runs print no progress
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(EXAMPLES / example)])

    assert result.exit_code == 0, result.output
    assert "smoke run PASSED" in result.output
    assert MARK not in result.output
    ranks = {int(rank): int(steps) for rank, steps in RANK_LINE.findall(result.output)}
    expected_processes = 1 if example == "single-gpu-loop" else 2
    assert spec.smoke_processes == expected_processes
    assert ranks == {rank: spec.smoke_steps for rank in range(expected_processes)}, result.output
    assert "end of epoch: reached" in result.output
    # then stopped as a preemption stops it, and started again in the same working directory
    resumed = {
        "ddp-nccl": "resume: checkpoint at step 2 written by the script, resumed at step 2",  # its snapshot.pt
        "hf-trainer": "resume: checkpoint at step 2 written on stop (checkpoint-2), resumed at step 2",
        "single-gpu-loop": "note: resume: the first start wrote nothing in its working directory to resume from",
    }
    assert resumed[example] in result.output


def test_the_vdk_executable_runs_the_demo_example():
    done = smoke_run(EXAMPLES / "ddp-nccl", timeout=180)
    assert done.returncode == 0, done.stdout
    assert dict(RANK_LINE.findall(done.stdout)) == {"0": "2", "1": "2"}
    assert "adapted for CPU: nccl->gloo" in done.stdout
    assert "ChildFailedError" not in done.stdout and "Traceback" not in done.stdout


def test_an_error_in_one_rank_fails_the_run_and_shows_its_traceback_once(tmp_path, local_runs_in_a_temporary_directory):
    job = tmp_path / "ddp-broken"
    shutil.copytree(EXAMPLES / "ddp-nccl", job)
    script = (job / "train.py").read_text()
    injected = '            if rank == 1:\n                raise ValueError("injected failure")\n'
    (job / "train.py").write_text(
        script.replace("            loss.backward()\n", "            loss.backward()\n" + injected)
    )

    done = smoke_run(job, timeout=180)

    assert done.returncode != 0
    out = done.stdout
    assert "smoke run FAILED" in out and "rank 1 failed: ValueError: injected failure" in out
    assert out.count("Traceback (most recent call last)") == 1, out
    assert out.count('raise ValueError("injected failure")') == 1, out
    assert out.count(f'File "{job / "train.py"}"') == 2  # <module> -> main(): the user's frames only
    assert "ChildFailedError" not in out and "[rank1]" not in out and "runpy" not in out
    # the failed run's files stay for a look, without the FIFO that relayed rank 0's stderr
    (kept,) = local_runs_in_a_temporary_directory.iterdir()
    assert protocol.log_path(kept, 1).exists() and no_fifo_left(kept)


def test_a_hanging_rank_is_stopped_at_the_timeout_with_where_it_hung(tmp_path, local_runs_in_a_temporary_directory):
    # rank 1 says it hangs, then sleeps before its first optimizer step; rank 0 takes one and waits for it in the
    # next forward
    hang = 'Path(os.environ["PID_DIR"], "hung").touch(); time.sleep(600)'
    job, pids = ddp_job(tmp_path, "hangs", hang)
    # Where the ranks are when the timeout strikes depends on how fast they got there: on a loaded machine rank 1
    # may still wait for its first batch. Whatever the load, the stack shown is rank 1's main thread's; where it
    # hung is asserted on the first run in which rank 1 got there (a longer timeout each time).
    for seconds in (20, 60, 180):
        (pids / "hung").unlink(missing_ok=True)
        done = smoke_run(job, env={"VDK_ML_TRAINING_SMOKE_TIMEOUT": f"{seconds}s"}, timeout=seconds + 120)
        out = done.stdout
        assert done.returncode != 0
        assert f"timed out after {format_duration(seconds)} (smoke_timeout): rank 0, 1 still running" in out, out
        # the rank's own thread, not one of the DataLoader's feeder threads listed before it
        assert re.search(rf"rank 1 was at:\n(  .*\n)*  File \"{re.escape(str(job))}/train.py\", line", out), out
        if (pids / "hung").exists():
            break
    else:
        pytest.fail(f"rank 1 did not reach its hang within {seconds} s, three times:\n{out}")
    assert stack_shows(out, "rank 1 was at:", job, line_of(job, "time.sleep(600)")), out
    assert stack_shows(out, "rank 0 was at:", job, line_of(job, "loss = model(")), out  # DDP waits in forward
    assert "threading.py" not in out, out
    # how far each rank got, although neither finished
    assert re.search(r"rank 0: 1 step, last loss [0-9.e-]+, stopped unfinished", out), out
    assert "rank 1: 0 steps, stopped unfinished" in out, out
    assert_all_gone(pids, 2)
    assert no_fifo_left(local_runs_in_a_temporary_directory)


def test_a_rank_killed_by_a_signal_fails_fast_with_the_signal(tmp_path):
    job, pids = ddp_job(tmp_path, "killed", "os.kill(os.getpid(), signal.SIGKILL)")
    started = time.monotonic()
    done = smoke_run(job, timeout=120)  # the smoke timeout is 10 minutes: far from it
    assert done.returncode != 0
    headline = next(line for line in done.stdout.splitlines() if line.startswith("smoke run FAILED"))
    # torchrun names the exit status of the first rank it saw end; without it, the cause is inferred
    assert re.search(r"rank 1 (was killed by SIGKILL|died without a Python error .*SIGKILL)", headline), headline
    assert "rank 0 failed" not in headline  # rank 0's "connection closed" is a consequence
    assert "out-of-memory killer" in done.stdout
    assert time.monotonic() - started < 120
    assert_all_gone(pids, 2)


def test_what_a_rank_left_behind_goes_when_the_run_ends(tmp_path):
    """A process a rank started and did not wait for (here a child that outlives its rank, as a DataLoader
    worker of a rank that died while it started does) is stopped when torchrun has ended."""
    script = """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        sys.exit(3)
    """
    mark = new_mark()
    job = make_job(tmp_path, "leaves-a-child", script, env=f"{PROCESS_MARK} = {mark}\n")
    done = smoke_run(job, timeout=180)
    assert done.returncode != 0 and "the script exited with 3" in done.stdout, done.stdout
    assert left_after(mark, 5) == []


def test_a_segfault_shows_the_python_stack_of_the_crashed_rank(tmp_path):
    job, pids = ddp_job(tmp_path, "crashes", "import ctypes; ctypes.string_at(0)")
    done = smoke_run(job, timeout=180)
    assert done.returncode != 0
    assert re.search(r"rank 1 (was killed by SIGSEGV|crashed \(Segmentation fault\))", done.stdout), done.stdout
    line = line_of(job, "string_at")
    assert stack_shows(done.stdout, "Python stack of rank 1 when it died:", job, line), done.stdout
    assert "threading.py" not in done.stdout
    assert_all_gone(pids, 2)


def test_a_module_entrypoint_with_its_package_in_the_job(tmp_path):
    job = make_job(tmp_path, "as-module", "", "entrypoint = -m trainer.main\nargs = --steps 4\nsmoke_steps = 3\n")
    (job / "train.py").unlink()
    (job / "trainer").mkdir()
    (job / "trainer" / "__init__.py").write_text("")
    (job / "trainer" / "model.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(2, 1).cuda()\n")
    (job / "trainer" / "main.py").write_text(
        textwrap.dedent(
            """
            import argparse, torch
            from trainer.model import build

            parser = argparse.ArgumentParser()
            parser.add_argument("--steps", type=int)
            model = build()
            optimizer = torch.optim.Adam(model.parameters())
            for _ in range(parser.parse_args().steps):
                model(torch.ones(1, 2, device="cuda")).sum().backward()
                optimizer.step()
            """
        )
    )
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code == 0, result.output
    assert RANK_LINE.findall(result.output) == [("0", "3")]


SPAWNED_POOL = """
import multiprocessing as mp
from dataclasses import dataclass
import torch

@dataclass
class Point:
    x: int

def make(i):
    return Point(i)

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("pool:", pool.map(make, range(3)), flush=True)
    model = torch.nn.Linear(2, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2, device="cuda")).sum().backward()
    optimizer.step()
"""


@pytest.mark.parametrize("start_method", [FORK, SPAWN])
def test_spawned_workers_return_objects_of_classes_the_script_defines(tmp_path, start_method):
    # Ranks forked from torchrun's agent inherit multiprocessing's `__mp_main__` alias of the agent's
    # module: results coming back from spawned workers must still find the script's classes.
    spec = load_job_spec(make_job(tmp_path, "pool", SPAWNED_POOL, "smoke_timeout = 60s\n"))
    run = launch(smoke_plan(spec, start_method=start_method))
    outcome = analyse(run)
    assert outcome.passed, outcome.headline
    assert [r.steps for r in outcome.ranks] == [1]


def test_an_ordinary_data_job_runs_unchanged(tmp_path):
    job = tmp_path / "data-job"
    job.mkdir()
    (job / "config.ini").write_text("[owner]\nteam = data\n")
    (job / "10_load.py").write_text(
        "from pathlib import Path\n\ndef run(job_input):\n"
        "    Path(__file__).with_name('ran.txt').write_text(job_input.get_name())\n"
    )
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code == 0, result.output
    assert (job / "ran.txt").read_text() == "data-job"
    assert "smoke run" not in result.output


FULL_RUN = """
import json, os
import torch, torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for _ in range(5):
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    steps += 1
with open(f"rank-{rank}.json", "w") as f:
    json.dump({"steps": steps, "world": dist.get_world_size(),
               "stand_ins": "vdk" in dist.init_process_group.__code__.co_filename,
               "output_dir_is_cwd": os.environ.get("VDK_ML_TRAINING_OUTPUT_DIR") == os.getcwd()}, f)
dist.destroy_process_group()
"""


def test_full_runs_train_to_completion_without_stand_ins(tmp_path, monkeypatch):
    job = make_job(tmp_path, "portable", FULL_RUN, "gpus_per_node = 0\nprocs_per_node = 2\nsmoke_steps = 1\n")
    runner = CliEntryBasedTestRunner(plugin)

    flagged = runner.invoke(["run", "--full", str(job)])
    assert flagged.exit_code == 0, flagged.output
    assert "full run PASSED" in flagged.output and "no GPU on this machine" in flagged.output
    # what the run wrote is in its working directory, outside the job, which the summary names
    work = Path(WORK_DIR.search(flagged.output).group(1))
    assert not work.is_relative_to(job) and (work / "train.py").read_text() == (job / "train.py").read_text()
    for rank in (0, 1):
        written = json.loads((work / f"rank-{rank}.json").read_text())
        # VDK_ML_TRAINING_OUTPUT_DIR names the working directory, as on a cluster it names the run's outputs
        assert written == {"steps": 5, "world": 2, "stand_ins": False, "output_dir_is_cwd": True}
    assert sorted(p.name for p in job.iterdir()) == ["config.ini", "train.py"]

    monkeypatch.setenv("VDK_ML_TRAINING_RUN_MODE", "full")
    by_setting = runner.invoke(["run", str(job)])  # the --full option is installed a second time here
    assert by_setting.exit_code == 0, by_setting.output
    again = Path(WORK_DIR.search(by_setting.output).group(1))
    assert again != work and json.loads((again / "rank-1.json").read_text())["steps"] == 5

    monkeypatch.delenv("VDK_ML_TRAINING_RUN_MODE")
    smoke = runner.invoke(["run", str(job)])  # the flag of the first invocation is not sticky
    assert smoke.exit_code == 0, smoke.output
    assert "smoke run PASSED" in smoke.output and "  working directory: " not in smoke.output
    assert dict(RANK_LINE.findall(smoke.output)) == {"0": "1", "1": "1"}  # smoke stopped after its step
    assert sorted(p.name for p in job.iterdir()) == ["config.ini", "train.py"]


def test_a_bad_config_fails_before_anything_runs(tmp_path):
    job = make_job(tmp_path, "bad-config", "print('never')\n", "nodes = 0\n")
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code != 0
    assert isinstance(result.exception, JobConfigError)
    assert "nodes" in str(result.exception) and "Fix:" in str(result.exception)
    assert "smoke run" not in result.output


def test_ranks_started_as_fresh_interpreters_work_too(tmp_path):
    # macOS, and job images, start ranks as new interpreters rather than forks of torchrun's agent.
    spec = load_job_spec(EXAMPLES / "ddp-nccl")
    outcome = analyse(launch(smoke_plan(spec, start_method=SPAWN)))
    assert outcome.passed, outcome.headline
    # each left its training loop at the first step of its second epoch: the code after it ran, and the script ended
    assert [(r.rank, r.steps, r.status) for r in outcome.ranks] == [(0, 2, "finished"), (1, 2, "finished")]
    assert outcome.training_end is not None and outcome.training_end.reached
    shutil.rmtree(outcome.run.run_dir)


def test_a_port_taken_before_torchrun_listens_is_retried_with_another(monkeypatch):
    from vdk.plugin.ml_training.local import launcher as launcher_module

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    ports = iter([busy.getsockname()[1]])
    real_free_port = launcher_module.free_port
    monkeypatch.setattr(launcher_module, "free_port", lambda: next(ports, None) or real_free_port())
    attempts = []
    real_launch_once = launcher_module._launch_once

    def launch_once(*args):
        attempts.append(real_launch_once(*args))
        return attempts[-1]

    monkeypatch.setattr(launcher_module, "_launch_once", launch_once)
    spec = load_job_spec(EXAMPLES / "single-gpu-loop")
    with busy:
        outcome = analyse(launcher_module.launch(smoke_plan(spec)))
    assert outcome.passed, outcome.headline
    assert [a.exit_code for a in attempts] == [1, 0]
    assert not attempts[0].run_dir.exists()  # the failed attempt left nothing behind
    shutil.rmtree(outcome.run.run_dir)


def test_a_full_run_of_cuda_code_without_a_gpu_says_what_to_do_instead():
    result = CliEntryBasedTestRunner(plugin).invoke(["run", "--full", str(EXAMPLES / "single-gpu-loop")])
    assert result.exit_code != 0
    assert "full run FAILED" in result.output and "Torch not compiled with CUDA enabled" in result.output
    assert "needs a GPU and this machine has none" in str(result.exception)
    # the fix that trains it here: the smoke run's CPU adaptations for the whole run
    assert f"`VDK_ML_TRAINING_ADAPT_TO_CPU=1 vdk run --full {EXAMPLES / 'single-gpu-loop'}`" in str(result.exception)


# A script that checks for the GPUs of the cluster's nodes and ends quietly without them.
NEEDS_EIGHT_GPUS = """
import torch

if __name__ == "__main__":
    if torch.cuda.device_count() < 8:
        print("this example needs 8 GPUs")
    else:
        model = torch.nn.Linear(2, 1).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2, device="cuda")).sum().backward()
        optimizer.step()
"""


def test_a_smoke_run_that_takes_no_optimizer_step_fails_and_says_why(tmp_path):
    job = make_job(tmp_path, "needs-8", NEEDS_EIGHT_GPUS, "gpus_per_node = 8\n")
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code != 0, result.output
    assert "smoke run FAILED" in result.output and "rank 1: 0 steps, the script ended" in result.output
    message = str(result.exception)
    assert "no optimizer step was taken: the script ended without calling step()" in message
    assert "more GPUs than the smoke run's node has (2 virtual GPUs: raise `smoke_processes`" in message

    (job / "config.ini").write_text(
        "[job]\ntype = ml-training\n[ml-training]\ngpus_per_node = 8\nsmoke_processes = 8\n"
    )
    assert CliEntryBasedTestRunner(plugin).invoke(["run", str(job)]).exit_code == 0


SPAWNS_NOTHING = """
import sys
import torch.multiprocessing as mp


def main(rank):
    raise AssertionError("never runs")


if __name__ == "__main__":
    mp.spawn(main, nprocs=len(sys.argv[1:]))
"""


def test_an_mp_spawn_of_no_process_is_named(tmp_path):
    job = make_job(tmp_path, "spawns-nothing", SPAWNS_NOTHING)
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code != 0, result.output
    assert "the launcher process: spawned 0 workers, the script ended" in result.output
    message = str(result.exception)
    assert "no optimizer step was taken: the script called torch.multiprocessing.spawn(nprocs=0)" in message
    assert "mp.spawn was asked for 0 processes" in message


def test_a_full_cpu_run_of_the_hugging_face_example_is_distributed(tmp_path):
    job = tmp_path / "hf-trainer"
    shutil.copytree(EXAMPLES / "hf-trainer", job)
    plan = full_plan(load_job_spec(job), gpus=0)
    assert plan.processes == 2 and "ACCELERATE_USE_CPU=true" in format_start(plan)
    outcome = analyse(launch(plan))
    assert outcome.passed, outcome.headline
    # 2048 examples, 16 a step and a process: each rank trains on its half
    assert [(r.rank, r.steps) for r in outcome.ranks] == [(0, 64), (1, 64)]
    assert "parallel_mode != ParallelMode.DISTRIBUTED" not in outcome.ranks[1].log.read_text()
    # its checkpoints and model are in the run's working directory, never in the job (nor the next image)
    assert (outcome.run.work.path / "outputs" / "config.json").exists()
    assert sorted(p.name for p in job.iterdir()) == ["config.ini", "requirements.txt", "train.py"]


def test_without_torch_nothing_starts_and_the_fix_is_to_install_it(
    tmp_path, monkeypatch, local_runs_in_a_temporary_directory
):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    job = make_job(tmp_path, "no-torch", "import torch\n")
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code != 0
    message = str(result.exception)
    assert f"torch is not installed in {sys.executable}'s environment" in message
    assert "pip install torch (or the CUDA build you need)" in message
    assert "smoke run of" not in result.output  # nothing started
    assert list(local_runs_in_a_temporary_directory.iterdir()) == []


STEPS_THEN_HANGS = steps_then_hangs(3, 600)


def test_a_full_run_stopped_at_max_runtime_says_how_far_each_rank_got(tmp_path):
    # the first step is written at once, later ones at most every 5 s: 1 to 3 steps, never "unknown". The limit
    # must leave time to start torchrun and import torch: 15 s does on an idle machine, not at a load of 10 (12 s
    # did not): then the second try.
    for seconds in (15, 40):
        job = make_job(
            tmp_path / str(seconds),
            "full-hangs",
            STEPS_THEN_HANGS,
            f"gpus_per_node = 0\nprocs_per_node = 1\nmax_runtime = {seconds}s\n",
        )
        outcome = analyse(launch(full_plan(load_job_spec(job), gpus=0)))
        assert outcome.run.timed_out and not outcome.passed
        (rank,) = outcome.ranks
        if rank.steps:
            break
    assert rank.steps in (1, 2, 3) and isinstance(rank.last_loss, float), rank


def test_a_full_run_adapts_gpu_code_to_cpu_when_asked(tmp_path):
    """VDK_ML_TRAINING_ADAPT_TO_CPU from the shell: `vdk run --full` of the NCCL example trains to its end."""
    job = tmp_path / "ddp-nccl"
    shutil.copytree(EXAMPLES / "ddp-nccl", job)
    done = smoke_run(job, "--full", env={protocol.ADAPT_TO_CPU: "1"}, timeout=300)
    assert done.returncode == 0, done.stdout
    assert "full run PASSED" in done.stdout and "adapted for CPU: nccl->gloo" in done.stdout, done.stdout
    # 4096 examples, batch 32, 2 ranks, 3 epochs
    assert re.search(r"rank 0: 192 steps, last loss [0-9.]+, the script ended", done.stdout), done.stdout
    # it saves model.pt next to its script: in the run's working directory, which the summary names
    work = WORK_DIR.search(done.stdout)
    assert work and (Path(work.group(1)) / "model.pt").is_file() and not (job / "model.pt").exists()
