"""Nothing outlives `vdk`: the real `vdk run` of a sleeping 2-rank job, and the real `vdk deploy` during its
smoke run, sent SIGINT (Ctrl-C), SIGTERM (a CI timeout), SIGHUP (a closed terminal) or SIGKILL. Afterwards
no process of the run is left in the process table (torchrun's agent, the ranks, their DataLoader
workers), within a bound; a signal that can be caught ends `vdk` with 128 + its number, a line that says
the run was interrupted, and no traceback. A deploy stopped that way pushed and created nothing."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from tests.support import vdk_cli
from tests.support.jobs import write_job
from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import marked
from tests.support.processes import new_mark
from tests.support.processes import wait_for_files

pytestmark = pytest.mark.slow

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
# Every rank starts a DataLoader worker, says it is ready, and sleeps in its first step.
SLEEPS = """\
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl")
    loader = torch.utils.data.DataLoader(torch.ones(8, 2), batch_size=2, num_workers=1, persistent_workers=True)
    batches = iter(loader)
    next(batches)
    Path(os.environ["READY_DIR"], f"rank-{dist.get_rank()}").write_text(str(os.getpid()))
    time.sleep(600)
"""
# Seconds within which every process must be gone: the grace period after SIGTERM is 3 s.
GONE_WITHIN = 15


def sleeping_job(root: Path, name: str, mark: str, ml: str = "", env: str = "") -> tuple[Path, Path]:
    ready = root / f"{name}-ready"
    ready.mkdir()
    job = write_job(
        root,
        name,
        team="ml-platform",
        ml="nodes = 2\ngpus_per_node = 1\n" + textwrap.dedent(ml),
        env=f"READY_DIR = {ready}\n{MARK} = {mark}\n{env}",
        files={"train.py": SLEEPS},
    )
    return job, ready


def start_vdk(*args: str) -> subprocess.Popen:
    """`vdk ARGS` started as a user does, with the session's registry (a deploy pushes to it)."""
    return vdk_cli.start_vdk(*args, env={k: v for k, v in os.environ.items() if k == "VDK_ML_TRAINING_REGISTRY"})


def stop_while_training(proc: subprocess.Popen, ready: Path, mark: str, sig: signal.Signals) -> str:
    """Wait until both ranks sleep in their first step, send `sig`, and return what vdk printed."""
    try:
        started = wait_for_files(ready, "rank-*", 2, 120, proc)
        assert started, proc.stdout.read() if proc.poll() is not None else "the ranks did not start"
        assert len(marked(mark)) >= 5  # torchrun's agent, 2 ranks, a DataLoader worker each
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out


def assert_ended_as_asked(proc: subprocess.Popen, out: str, sig: signal.Signals, mode: str = "smoke") -> None:
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        return
    assert proc.returncode == 128 + sig, out
    assert f"{mode} run interrupted by {sig.name}: every process of it was stopped" in out, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_vdk_run_leaves_no_process_of_its_run(sig, tmp_path, local_runs_in_a_temporary_directory):
    mark = new_mark()
    job, ready = sleeping_job(tmp_path, "sleeps", mark)
    proc = start_vdk("run", str(job))
    out = stop_while_training(proc, ready, mark, sig)
    assert left_after(mark, GONE_WITHIN) == [], out
    assert_ended_as_asked(proc, out, sig)
    if sig != signal.SIGKILL:  # a FIFO left in a run directory would block whoever opens it for the logs
        runs = local_runs_in_a_temporary_directory
        assert not [p for p in runs.rglob("*") if stat.S_ISFIFO(p.lstat().st_mode)]


def test_a_full_run_killed_with_vdk_leaves_no_rank(tmp_path):
    """`--full`: ranks are fresh interpreters in sessions of their own, found by torchrun's agent."""
    mark = new_mark()
    adapted = "VDK_ML_TRAINING_ADAPT_TO_CPU = 1\n"  # its NCCL on this machine's CPU
    job, ready = sleeping_job(tmp_path, "sleeps-full", mark, "procs_per_node = 2\n", adapted)
    proc = start_vdk("run", "--full", str(job))
    try:
        assert wait_for_files(ready, "rank-*", 1, 120, proc), proc.stdout.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert left_after(mark, GONE_WITHIN) == []


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_vdk_deploy_stopped_during_its_smoke_run_leaves_nothing(
    sig, tmp_path, registry, base_image, cluster, monkeypatch, isolated_environment
):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    mark = new_mark()
    name = f"deploy-{sig.name.lower()}"
    # the test base stands in for a PyTorch base: it says it has torch
    ml = f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\n"
    job, ready = sleeping_job(tmp_path, name, mark, ml)
    proc = start_vdk("deploy", "-p", str(job))
    out = stop_while_training(proc, ready, mark, sig)
    assert left_after(mark, GONE_WITHIN) == [], out
    assert_ended_as_asked(proc, out, sig)
    if sig != signal.SIGKILL:
        assert f"vdk deploy interrupted by {sig.name}." in out
    tags = requests.get(f"{registry.url}/v2/team/{name}/tags/list", timeout=5)
    assert tags.status_code == 404 or not tags.json().get("tags")  # nothing pushed
    assert fake.run_objects() == []  # nothing created


def test_vdk_stopped_by_a_signal_ends_the_helper_process_a_check_was_waiting_for(tmp_path):
    """uv of a dependency check, resolving in a thread beside the smoke run, ends with `vdk`."""
    started = tmp_path / "helper-started"
    program = textwrap.dedent(
        f"""
        import sys, threading, time
        from vdk.plugin.ml_training import helper_processes
        from vdk.plugin.ml_training.cli import interrupts

        sleeper = [sys.executable, "-c", "open({str(started)!r}, 'w').close(); import time; time.sleep(120)"]
        threading.Thread(target=helper_processes.run, args=(sleeper,), daemon=True).start()
        with interrupts.stop_on_signals():
            try:
                time.sleep(120)
            except KeyboardInterrupt as e:
                interrupts.exit_interrupted(e, "stopped")
        """
    )
    mark = new_mark()
    env = {**os.environ, MARK: mark}
    proc = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.PIPE, text=True, env=env)
    assert wait_for_files(tmp_path, started.name, 1, 60, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "stopped" in err and "Traceback" not in err
    assert left_after(mark, 5) == []  # not left to sleep its 120 s under PID 1
