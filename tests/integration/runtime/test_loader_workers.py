"""A rank that dies while its DataLoader workers are still starting: the workers end too."""

import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark

RANK = textwrap.dedent(
    """
    import os, sys, time
    import torch
    if sys.argv[1] == "patched":
        from vdk.plugin.ml_training.runtime import loader_workers
        loader_workers.install()

    def slow_start(worker_id):
        time.sleep(2)  # a loaded machine: the rank is gone before the worker's watchdog starts

    data = torch.utils.data.TensorDataset(torch.ones(8, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=1, worker_init_fn=slow_start)
    iterator = iter(loader)  # the worker is forked here
    os._exit(1)  # the rank dies (a crash in its first step)
    """
)


def _orphans(variant: str) -> list[int]:
    mark = new_mark()
    done = subprocess.run(
        [sys.executable, "-c", RANK, variant], env={**__import__("os").environ, MARK: mark}, timeout=120
    )
    assert done.returncode == 1
    time.sleep(3)  # the worker is past its start
    return left_after(mark, 12)  # torch's watchdog looks every 5 s


@pytest.mark.slow
def test_workers_of_a_rank_that_died_while_they_started_end():
    left = _orphans("patched")
    assert left == []


@pytest.mark.slow
def test_without_the_patch_such_a_worker_outlives_its_rank():
    """What the patch is for (torch 2.13): this fails once torch itself compares with the forking pid."""
    left = _orphans("plain")
    try:
        assert left, "torch's own watchdog noticed the dead rank: the patch may be obsolete"
    finally:
        for pid in left:
            __import__("os").kill(pid, 9)


def test_the_patch_waits_for_the_script_to_import_torch():
    program = textwrap.dedent(
        """
        import sys
        from vdk.plugin.ml_training.runtime import loader_workers
        loader_workers.install()
        assert "torch" not in sys.modules  # the script sets its environment before torch reads it
        import torch
        from torch.utils.data._utils.worker import ManagerWatchdog
        print(getattr(ManagerWatchdog.__init__, "_vdk_parent_pid", False))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
