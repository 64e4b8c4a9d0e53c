"""torch's launcher, `python -m torch.distributed.run`, whose agents leave its exit barrier together.

The command every pod (and a container run) starts: `python -m vdk.plugin.ml_training.runtime.torchrun_launch
[torchrun flags] -m <bootstrap> <entrypoint> <args>` runs torch.distributed.run as `-m` runs it, with one
change. torch's exit barrier (elastic's `_exit_barrier`, a `store_util.barrier` over the rendezvous store) has
each agent `add` itself to a counter and then `wait` for the key the last one to arrive sets. The agent that
hosts the store (node 0's), when it arrives last, sets that key, returns at once and ends, closing the store
while another agent is still between its `add` and its `wait`, or before its wait got the answer: that agent
logs "Error waiting on exit barrier ... Failed to recv, got 0 bytes" although every rank of the run finished.
So after torch's barrier succeeded, each agent adds itself to a second counter in the same store and waits
until every agent has (a few seconds at most, never torch's 300 s): an agent adds itself there only once its
wait in torch's barrier has returned, so the store's host leaves after every other agent has left torch's
barrier. Another agent's wait in that second step may lose the store when the host leaves: that is expected
and quiet. Nothing in the second step changes an exit code or delays a run that failed (torch calls its exit
barrier only when the local ranks succeeded, and the second step runs only when torch's barrier did).

A torch whose elastic agent has other internals (an older or newer base image's) gets torch's own barrier.
Standard library and torch only (the image's runtime layer ships it).
"""

from __future__ import annotations

import runpy
import time
from datetime import timedelta
from typing import Any

LEAVE_KEY = "vdk-ml-training/agents-left"  # the second counter, in the rendezvous store beside torch's keys
LEAVE_SECONDS = 5.0  # how long an agent waits for the others to have left torch's barrier
_POLL_SECONDS = 0.02


def main() -> None:
    """`python -m torch.distributed.run` with the safe exit barrier (its arguments are this process's)."""
    make_exit_barrier_safe()
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


def make_exit_barrier_safe() -> bool:
    """Every elastic agent of this process leaves its exit barrier together with the others (once; idempotent).
    False where this torch has no such barrier to wrap."""
    try:
        from torch.distributed.elastic.agent.server import api
        from torch.distributed.elastic.utils import store as store_util
    except ImportError:
        return False
    agent = getattr(api, "SimpleElasticAgent", None)
    barrier = getattr(agent, "_exit_barrier", None)
    prefix = getattr(api, "_TERMINAL_STATE_SYNC_ID", None)
    last_member = getattr(store_util, "_LAST_MEMBER_CHECKIN", None)
    if agent is None or barrier is None or not isinstance(prefix, str) or not isinstance(last_member, str):
        return False
    if getattr(barrier, "_vdk_leaves_together", False):
        return True
    done_key = prefix + last_member  # set by the last agent to arrive at torch's barrier

    def _exit_barrier(self: Any) -> None:
        barrier(self)
        try:
            store = self._store
            world_size = self._worker_group.group_world_size
        except AttributeError:
            return
        leave_together(store, world_size, done_key)

    _exit_barrier._vdk_leaves_together = True  # type: ignore[attr-defined]  # attribute of a function object
    _exit_barrier.__wrapped__ = barrier  # type: ignore[attr-defined]  # torch's own, as functools.wraps names it
    agent._exit_barrier = _exit_barrier
    return True


def leave_together(store: Any, world_size: int, done_key: str, timeout: float = LEAVE_SECONDS) -> bool:
    """After torch's exit barrier: this agent has left it; it waits (at most `timeout` seconds) until every
    agent has. True when all did; False, quietly, when torch's barrier had not succeeded (`done_key` unset), the
    store is gone (its host left, after every agent had) or the time ran out."""
    try:
        old_timeout = store.timeout
        store.set_timeout(timedelta(seconds=timeout))  # a store that stops answering fails each request in time
    except Exception:  # noqa: BLE001 - a store without timeouts: its own
        old_timeout = None
    try:
        if world_size <= 1 or not store.check([done_key]):
            return False
        left = store.add(LEAVE_KEY, 1)
        deadline = time.monotonic() + timeout
        while left < world_size:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)
            left = store.add(LEAVE_KEY, 0)
        return True
    except Exception:  # noqa: BLE001 - the store's host has ended (all agents left) or the store failed: nothing to do
        return False
    finally:
        if old_timeout is not None:
            try:
                store.set_timeout(old_timeout)
            except Exception:  # noqa: BLE001 - the store is gone
                pass


if __name__ == "__main__":
    main()
