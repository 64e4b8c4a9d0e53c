"""A stopped rank's stacks, as real faulthandler dumps them and the launcher reads them: one SIGTERM per rank when a
run is stopped (a second one in the middle of the dump ends the rank there, faulthandler chaining to the default
action), and a dump that was cut short is said to be, not shown as if it were the whole stack."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vdk.plugin.ml_training.local import process_tree
from vdk.plugin.ml_training.local.stack_dump import CUT_SHORT
from vdk.plugin.ml_training.local.stack_dump import NOT_RECORDED
from vdk.plugin.ml_training.local.stack_dump import user_stack
from vdk.plugin.ml_training.runtime import protocol

# A rank as the runtime makes one: its stack file's header and faulthandler on SIGTERM, then 30 threads 60 frames
# deep (a dump of some length, as a DataLoader's and a training library's threads make), its pid in the run
# directory, and its own code waiting in `hang`.
RANK = textwrap.dedent(
    """\
    import os, sys, threading, time
    from vdk.plugin.ml_training.runtime import protocol, rank_process
    from vdk.plugin.ml_training.runtime.report import RankReport

    run_dir, rank = sys.argv[1], int(sys.argv[2])
    rank_process.dump_stacks_on_crash(protocol.stack_path(run_dir, rank))

    def deep(n):
        if n == 0:
            time.sleep(600)
        deep(n - 1)

    def hang():
        deep(20)

    for _ in range(30):
        threading.Thread(target=deep, args=(60,), daemon=True).start()
    RankReport(run_dir, rank, rank)
    hang()
    """
)
# torchrun's agent as far as stopping goes: on SIGTERM it passes one SIGTERM on to each rank (elastic's close).
AGENT = textwrap.dedent(
    """\
    import os, signal, subprocess, sys, time
    ranks = [subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2], str(r)]) for r in range(2)]

    def close(*_):
        for r in ranks:
            r.send_signal(signal.SIGTERM)
        for r in ranks:
            r.wait()
        os._exit(1)

    signal.signal(signal.SIGTERM, close)
    while True:
        time.sleep(1)
    """
)


def start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "agent.py").write_text(AGENT)
    agent = subprocess.Popen(
        [sys.executable, str(tmp_path / "agent.py"), str(tmp_path / "rank.py"), str(run_dir)], start_new_session=True
    )
    deadline = time.monotonic() + 60
    while len(protocol.read_results(run_dir)) < 2:
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)
    time.sleep(0.5)  # the threads are up
    return agent, run_dir


def where(run_dir: Path, rank: int, job_dir: Path) -> list[str]:
    return user_stack(protocol.stack_path(run_dir, rank).read_text(), job_dir, limit=100)


def test_a_stopped_run_s_ranks_each_dump_their_whole_stack(tmp_path):
    """Five stops in a row: every rank's dump reaches its main thread's outermost frame (before, the agent's and the
    launcher's SIGTERMs overlapped and cut most dumps short)."""
    for attempt in range(5):
        agent, run_dir = start_run(tmp_path / str(attempt))
        process_tree.stop_through_agent(agent.pid, run_dir, poll=agent.poll)
        agent.wait(timeout=30)
        for rank in range(2):
            stack = where(run_dir, rank, tmp_path / str(attempt))
            assert stack[-1].endswith("in <module>") and any("in hang" in f for f in stack), (attempt, rank, stack)
            assert f"  {CUT_SHORT}" not in stack and f"  {NOT_RECORDED}" not in stack


def test_a_dump_cut_short_by_a_second_sigterm_says_so(tmp_path):
    """Two SIGTERMs at once, straight to the ranks: whatever each dump holds is shown, and one that stops before
    the main thread's outermost frame says that the rest was not recorded."""
    cut = 0
    for attempt in range(5):
        agent, run_dir = start_run(tmp_path / str(attempt))
        for pid in process_tree.rank_pids(run_dir):
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.0005)
            os.kill(pid, signal.SIGTERM)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
        for pid in process_tree.rank_pids(run_dir):
            deadline = time.monotonic() + 30
            while process_tree.running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        for rank in range(2):
            stack = where(run_dir, rank, tmp_path / str(attempt))
            whole = bool(stack) and stack[-1].endswith("in <module>")
            # ended before it wrote a byte of its dump: no stack (shown as "no stack recorded"), else what it holds
            # and a line that says the rest is missing
            told = stack[-1:] in ([], [f"  {CUT_SHORT}"], [f"  {NOT_RECORDED}"])
            assert whole != told, stack
            cut += told
    assert cut, "no dump was cut short: the test did not test anything"
