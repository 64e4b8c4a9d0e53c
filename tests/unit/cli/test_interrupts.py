"""Nothing outlives `vdk`: the real `vdk run` of a sleeping 2-rank job, and the real `vdk deploy` during its
smoke run, sent SIGINT (Ctrl-C), SIGTERM (a CI timeout), SIGHUP (a closed terminal) or SIGKILL. Afterwards
no process of the run is left in the process table (torchrun's agent, the ranks, their DataLoader
workers), within a bound; a signal that can be caught ends `vdk` with 128 + its number, a line that says
the run was interrupted, and no traceback. A deploy stopped that way pushed and created nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.processes import MARK
from tests.support.processes import marked
from tests.support.processes import wait_for_files
from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.local.launcher import RUNS_DIR_ENV

pytestmark = pytest.mark.slow

VDK = Path(sys.executable).parent / "vdk"
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") or k == RUNS_DIR_ENV}
    env.update({k: v for k, v in os.environ.items() if k in ("VDK_ML_TRAINING_REGISTRY",)})
    return subprocess.Popen(
        [str(VDK), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C's default even when the tests run in the background (a shell makes them ignore SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


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


def test_a_signal_vdk_was_started_ignoring_stays_ignored():
    """`nohup vdk run ...` must survive its terminal's hangup; a shell's background job ignores SIGINT."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts.stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            with pytest.raises(interrupts.Interrupted) as stopped:
                signal.raise_signal(signal.SIGTERM)
            assert (stopped.value.name, stopped.value.exit_code) == ("SIGTERM", 143)
            signal.raise_signal(signal.SIGTERM)  # a second one while stopping is ignored
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
