"""The lifeline from `vdk` to a run's first process: the child learns that `vdk` is gone however `vdk`
ended (SIGKILL included), and only then; `vdk`'s other children never hold it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vdk.plugin.ml_training.local.lifeline import Lifeline

# The run's first process: says when the lifeline was cut, then ends.
CHILD = """
import sys, time
from pathlib import Path
from vdk.plugin.ml_training.local import lifeline

cut = Path(sys.argv[1])
lifeline.watch(lambda: cut.write_text("cut"))
Path(sys.argv[2]).write_text("watching")
deadline = time.monotonic() + 30
while not cut.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""

# `vdk`: starts the child on a lifeline, and another child without it, then waits to be killed.
PARENT = """
import os, subprocess, sys, time
from vdk.plugin.ml_training.local.lifeline import Lifeline

line = Lifeline()
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]],
                         env={**os.environ, **line.env()}, pass_fds=(line.read_fd,))
line.started()
other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # holds no end of it
print(other.pid, flush=True)
time.sleep(60)
"""


def wait_for(path: Path, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.exists()


def test_cut_by_the_parent_when_the_run_is_over(tmp_path):
    line = Lifeline()
    cut, watching = tmp_path / "cut", tmp_path / "watching"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(cut), str(watching)],
        env={**os.environ, **line.env()},
        pass_fds=(line.read_fd,),
    )
    line.started()
    try:
        assert wait_for(watching)
        time.sleep(0.2)
        assert not cut.exists()  # not while the parent holds it
        line.cut()
        assert wait_for(cut)
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()


def test_cut_when_the_parent_is_killed(tmp_path):
    cut, watching = tmp_path / "cut", tmp_path / "watching"
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), textwrap.dedent(CHILD), str(cut), str(watching)],
        stdout=subprocess.PIPE,
        text=True,
    )
    other = int(parent.stdout.readline())  # still alive below: it holds no end of the lifeline
    try:
        assert wait_for(watching)
        assert not cut.exists()
        parent.send_signal(signal.SIGKILL)  # no handler of the parent runs
        parent.wait(timeout=10)
        assert wait_for(cut)  # the child learnt it at once
    finally:
        if parent.poll() is None:
            parent.kill()
        os.kill(other, signal.SIGKILL)
