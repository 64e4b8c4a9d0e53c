"""Wall time of `vdk run EXAMPLE` (a smoke run) against the floor: the same script, same steps and
processes, with the same CPU stand-ins and virtual GPUs but without device tracking, started by a minimal
hand-made launcher that sets RANK, WORLD_SIZE, MASTER_ADDR/PORT itself (no torchrun, no vdk). `vdk run`
tracks devices (the default), so the ratio includes what tracking costs; `untracked` is `vdk run` of a
copy of the example with `smoke_device_tracking = false`, to show that cost by itself.

`vdk run` forks its ranks from torchrun's agent, which has imported torch already, and ranks end
without an interpreter teardown; the plain floor's ranks each import torch and tear down. So a
second floor, `fork floor`, does the same by hand: import torch once, fork the ranks, `os._exit`.
Against it, what remains is the cost of torchrun's agent (rendezvous, monitoring) and of the vdk CLI.
`launcher` is the plugin's launcher (torchrun included) without the vdk CLI around it, to show where
the overhead goes. Every variant runs the same smoke run (the end of the first epoch included); the
floors run in a copy of the job made before timing, `vdk run` and `launcher` make their working
directory (and `vdk run` checks the imports) within their time. A job with a requirements.txt runs with its
dependency overlay (local/overlay.py) in every variant: the floors get the one `vdk run` uses (installed,
or taken from the cache, before timing), `vdk run` and `launcher` look it up within their time. Variants
alternate within each round; medians are compared.

    .venv/bin/python benchmarks/smoke_overhead.py [--rounds 5] [EXAMPLE ...]

Target: vdk run <= 1.3 x floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local import overlay
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.runtime import protocol

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["ddp-nccl", "hf-trainer", "single-gpu-loop"]
VDK = Path(sys.executable).parent / "vdk"
TARGET = 1.3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def work_copy(job: Path) -> Path:
    """A copy of the job to run the floors in (made once, outside the timing): like `vdk run`'s working
    directory, it keeps what the script writes out of the examples."""
    copy = Path(tempfile.gettempdir()) / f"vdk-bench-work-{os.getpid()}" / job.name
    if not copy.exists():
        shutil.copytree(job, copy)
    return copy


def plan_of(job: Path):
    """The smoke run's plan, with the job's dependency overlay (taken from the cache: made before timing)."""
    spec = load_job_spec(job)
    return spec, smoke_plan(spec, overlay=overlay.prepare(spec, print))


def floor(job: Path) -> float:
    """Start the ranks by hand, as one would without torchrun; seconds until all have exited."""
    spec, plan = plan_of(job)
    run_dir = Path(tempfile.mkdtemp(prefix="floor-"))
    port = str(_free_port())
    untracked = {protocol.DEVICE_TRACKING: "0"}
    started = time.monotonic()
    procs = []
    for rank in range(plan.processes):
        env = {
            **plan.env,
            **untracked,
            protocol.RUN_DIR: str(run_dir),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(plan.processes),
            "LOCAL_WORLD_SIZE": str(plan.processes),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "vdk.plugin.ml_training.runtime.bootstrap", *spec.command_args(smoke=True)],
                cwd=work_copy(job),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    codes = [p.wait() for p in procs]
    elapsed = time.monotonic() - started
    statuses = {r["status"] for r in protocol.read_results(run_dir).values()}
    shutil.rmtree(run_dir, ignore_errors=True)
    if codes != [0] * len(codes) or not statuses <= {protocol.STOPPED, protocol.FINISHED}:
        raise SystemExit(f"floor run of {job.name} failed: exit codes {codes}, statuses {statuses}")
    return elapsed


FORK_FLOOR = """
import os, sys
import torch  # once, before forking the ranks, as torchrun's agent has when it forks them

processes, port, entry = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pids = []
for rank in range(processes):
    pid = os.fork()
    if pid == 0:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                          LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        code = 1
        try:
            from vdk.plugin.ml_training.runtime.bootstrap import main
            code = main(entry)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
sys.stdout.flush()
os._exit(0 if codes == [0] * processes else 1)
"""


def fork_floor(job: Path) -> float:
    """Import torch once, fork the ranks by hand, end them without teardown."""
    spec, plan = plan_of(job)
    run_dir = Path(tempfile.mkdtemp(prefix="floor-"))
    env = {**plan.env, protocol.DEVICE_TRACKING: "0", protocol.RUN_DIR: str(run_dir)}
    command = [sys.executable, "-c", FORK_FLOOR, str(plan.processes), str(_free_port()), *spec.command_args(smoke=True)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=work_copy(job), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.monotonic() - started
    statuses = {r["status"] for r in protocol.read_results(run_dir).values()}
    shutil.rmtree(run_dir, ignore_errors=True)
    if done.returncode != 0 or not statuses <= {protocol.STOPPED, protocol.FINISHED}:
        raise SystemExit(f"fork floor run of {job.name} failed: exit code {done.returncode}, statuses {statuses}")
    return elapsed


def launcher(job: Path) -> float:
    """The plugin's launcher (torchrun and all) in a fresh interpreter, without the vdk CLI."""
    code = (
        "import sys, shutil\n"
        "from vdk.plugin.ml_training.job import load_job_spec\n"
        "from vdk.plugin.ml_training.local import overlay\n"
        "from vdk.plugin.ml_training.local.launcher import launch\n"
        "from vdk.plugin.ml_training.local.outcome import analyse\n"
        "from vdk.plugin.ml_training.local.launch_plan import smoke_plan\n"
        "spec = load_job_spec(sys.argv[1])\n"
        "outcome = analyse(launch(smoke_plan(spec, overlay=overlay.prepare(spec, print))))\n"
        "shutil.rmtree(outcome.run.run_dir)\n"
        "sys.exit(0 if outcome.passed else 1)\n"
    )
    return _timed([sys.executable, "-c", code, str(job)], job)


def vdk_run(job: Path) -> float:
    return _timed([str(VDK), "run", str(job)], job)


def untracked(job: Path) -> float:
    """`vdk run` of the example with `smoke_device_tracking = false` (a copy, next to the original)."""
    copy = Path(tempfile.gettempdir()) / f"vdk-bench-untracked-{os.getpid()}" / job.name
    if not copy.exists():
        shutil.copytree(job, copy)
        config = copy / "config.ini"
        text = config.read_text(encoding="utf-8")
        config.write_text(text.replace("[ml-training]\n", "[ml-training]\nsmoke_device_tracking = false\n", 1))
    return _timed([str(VDK), "run", str(copy)], job)


def _timed(command: list[str], job: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    started = time.monotonic()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} on {job.name} failed with exit code {done.returncode}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("examples", nargs="*", default=EXAMPLES)
    args = parser.parse_args()

    variants = {
        "floor": floor,
        "fork floor": fork_floor,
        "launcher": launcher,
        "untracked": untracked,
        "vdk run": vdk_run,
    }
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds, variants alternate")
    verdicts = []
    for name in args.examples:
        job = ROOT / "examples" / name
        spec, plan = plan_of(job)  # the overlay, if the job has requirements: installed now, not while timed
        deps = next((n for n in plan.notes if "overlay" in n), "no requirements.txt: no overlay")
        print(f"\n{name}: {spec.smoke_processes} process(es), {spec.smoke_steps} step(s); {deps}")
        vdk_run(job)  # warm the page cache and byte-code caches for every variant alike
        times: dict[str, list[float]] = {v: [] for v in variants}
        for round_ in range(args.rounds):
            order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for variant in order:
                times[variant].append(variants[variant](job))
            print(
                f"  round {round_ + 1}: "
                + "  ".join(f"{v} {times[v][-1]:.2f} s ({times[v][-1] / times['floor'][-1]:.2f}x)" for v in variants)
            )
        medians = {v: statistics.median(t) for v, t in times.items()}
        ratio = medians["vdk run"] / medians["floor"]
        strict = medians["vdk run"] / medians["fork floor"]
        print("  median: " + ", ".join(f"{v} {m:.2f} s" for v, m in medians.items()))
        print(
            f"  vdk run / floor = {ratio:.2f}x ({'within' if ratio <= TARGET else 'OVER'} the {TARGET}x target); "
            f"vdk run / fork floor = {strict:.2f}x; "
            f"torchrun costs {medians['launcher'] - medians['fork floor']:+.2f} s, "
            f"the vdk CLI {medians['untracked'] - medians['launcher']:+.2f} s, "
            f"device tracking {medians['vdk run'] - medians['untracked']:+.2f} s"
        )
        verdicts.append((ratio <= TARGET, strict <= TARGET))
    print(
        f"\n{sum(v[0] for v in verdicts)} of {len(verdicts)} examples within {TARGET}x of the floor, "
        f"{sum(v[1] for v in verdicts)} within {TARGET}x of the fork floor"
    )


if __name__ == "__main__":
    main()
