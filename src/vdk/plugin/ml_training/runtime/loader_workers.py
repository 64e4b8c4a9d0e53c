"""DataLoader workers that end with their rank, however early it dies.

torch's worker loop notices that its rank is gone by its parent pid changing: ManagerWatchdog takes
getppid() when the worker has started (after `worker_init_fn`) and compares it every 5 s. A rank that
dies while its workers are still starting (a crash in the first step, on a loaded machine) is already
gone when they take it: they take init's pid for the rank's and wait forever — holding the pipe by
which torchrun learns that the rank ended, so the run hangs until its timeout instead of failing at
once. The watchdog here compares with the pid the worker was forked from instead. Standard library and
torch only."""

from __future__ import annotations

import multiprocessing

from vdk.plugin.ml_training.runtime import post_import

WORKER_MODULE = "torch.utils.data._utils.worker"


def install() -> None:
    """Patch torch's ManagerWatchdog (POSIX: the one with `manager_pid`) when torch is imported (the
    user's script imports it, after setting its environment); idempotent."""
    post_import.when_imported(WORKER_MODULE, _patch)


def _patch(worker) -> None:
    watchdog = getattr(worker, "ManagerWatchdog", None)
    if watchdog is None or getattr(watchdog.__init__, "_vdk_parent_pid", False):
        return
    original = watchdog.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        parent = multiprocessing.parent_process()
        if parent is not None and parent.pid is not None and hasattr(self, "manager_pid"):
            self.manager_pid = parent.pid

    __init__._vdk_parent_pid = True  # type: ignore[attr-defined]  # attribute of a function object
    watchdog.__init__ = __init__
