"""Nothing a rank starts outlives `vdk run`: a child in a session of its own (`start_new_session=True`) and a
daemon that double-forks, setsid()s and ignores SIGTERM and SIGHUP, started by each of 2 ranks, are gone when
`vdk run` is sent SIGINT, SIGTERM or SIGKILL, when the smoke timeout stops the run, and when the run ends by
itself (the real `vdk` executable, real torchrun; processes found by a mark in their environment, which every
descendant inherits)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import marked
from tests.support.processes import new_mark
from tests.support.processes import wait_for_files
from tests.support.vdk_cli import start_vdk
from vdk.plugin.ml_training.units import format_duration

pytestmark = pytest.mark.slow

# Each rank starts a sleeper in a new session and a daemon, says so, then sleeps (or, with END set, ends).
STARTS_DESCENDANTS = """\
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    ready = Path(os.environ["READY_DIR"])
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    if os.fork() == 0:  # the classic daemon: fork, setsid, fork again, the middle one goes
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            (ready / f"daemon-{rank}").write_text(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    while not (ready / f"daemon-{rank}").exists():
        time.sleep(0.05)
    (ready / f"rank-{rank}").write_text(str(os.getpid()))
    if not os.environ.get("END"):
        time.sleep(600)
"""
# The grace after SIGTERM is 3 s; the rest is the time a loaded machine takes to tear down torch processes.
GONE_WITHIN = 15


def start(tmp_path: Path, mark: str, ml: str = "", env: str = "") -> tuple[subprocess.Popen, Path]:
    ready = tmp_path / "ready"
    ready.mkdir(parents=True)
    job = write_job(
        tmp_path,
        "leaves-daemons",
        ml="nodes = 2\ngpus_per_node = 1\n" + ml,
        env=f"READY_DIR = {ready}\n{MARK} = {mark}\n{env}",
        files={"train.py": STARTS_DESCENDANTS},
    )
    return start_vdk("run", str(job)), ready


def wait_until_started(proc: subprocess.Popen, ready: Path, mark: str) -> None:
    if not wait_for_files(ready, "rank-*", 2, 180, proc):
        out = proc.communicate(timeout=60)[0] if proc.poll() is not None else "the ranks did not start"
        raise AssertionError(out)
    daemons = [int((ready / f"daemon-{rank}").read_text()) for rank in (0, 1)]
    assert set(daemons) <= set(marked(mark))
    # torchrun's agent, 2 ranks, 2 sleepers in their own sessions, 2 daemons (reparented away from the ranks)
    assert len(marked(mark)) >= 7


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_sessions_and_daemons_of_the_ranks_go_with_vdk(sig, tmp_path, local_runs_in_a_temporary_directory):
    mark = new_mark()
    proc, ready = start(tmp_path, mark)
    try:
        wait_until_started(proc, ready, mark)
        proc.send_signal(sig)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert left_after(mark, GONE_WITHIN) == [], out
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 128 + sig), out


def test_sessions_and_daemons_of_the_ranks_go_when_the_smoke_timeout_stops_the_run(
    tmp_path, local_runs_in_a_temporary_directory
):
    # The timeout must strike once every rank started its descendants: 20 s does on an idle machine; a loaded one
    # may need the second try. Whatever was started by then is gone each time.
    for seconds in (20, 60):
        mark = new_mark()
        proc, ready = start(tmp_path / str(seconds), mark, ml=f"smoke_timeout = {seconds}s\n")
        try:
            out = proc.communicate(timeout=seconds + 120)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
        assert f"timed out after {format_duration(seconds)} (smoke_timeout)" in out, out
        assert left_after(mark, GONE_WITHIN) == [], out
        if all((ready / f"rank-{rank}").exists() for rank in (0, 1)):
            break
    else:
        pytest.fail(f"the ranks did not start their descendants within {seconds} s, twice:\n{out}")


def test_sessions_and_daemons_of_the_ranks_go_when_the_run_ends(tmp_path, local_runs_in_a_temporary_directory):
    mark = new_mark()
    proc, ready = start(tmp_path, mark, env="END = 1\n")
    out = proc.communicate(timeout=300)[0]
    assert len(list(ready.glob("daemon-*"))) == 2, out
    assert left_after(mark, GONE_WITHIN) == [], out
