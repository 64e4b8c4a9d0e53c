"""torchrun for local runs: `python -m vdk.plugin.ml_training.local.torchrun_agent [torchrun flags] ...`.

Exactly what the `torchrun` console script does (`torch.distributed.run.main()`), with three
differences: torch's log formatter, which imports torch._dynamo (over 1 s) to format the first
exception it logs, is replaced by a plain one; the process ends at once instead of spending 0.3-1 s
tearing down an interpreter that imported torch; and a rank forked from it ends as soon as it has
returned its result, instead of staying until every rank has (torch's elastic agent keeps it waiting):
a smoke rank that stopped leaves its peers' collectives (its connections close) instead of leaving
them hanging in one until the timeout (runtime/smoke_stop.py). Its exit code is torchrun's; its log
goes to the launcher's agent.log.

It also holds the run's end of `vdk`'s lifeline (local/lifeline.py): when `vdk` is gone, however it
ended (SIGKILL included), the agent stops every rank and itself, so that no training outlives `vdk`.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from vdk.plugin.ml_training.local import lifeline
from vdk.plugin.ml_training.local import process_tree
from vdk.plugin.ml_training.runtime import protocol


def main() -> None:
    code = 1
    lifeline.watch(_stop_the_run)
    try:
        from torch.distributed.run import main as torchrun

        _plain_torch_log_format()
        _forked_ranks_end_when_done()
        torchrun()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: B036 - ChildFailedError, SignalException, KeyboardInterrupt: logged, exit 1
        traceback.print_exc()
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stop_the_run() -> None:
    """`vdk` is gone: SIGTERM to every rank (forked ranks share this process's group; spawned ones have
    their own sessions) and to this process (torchrun passes it on), SIGKILL after the grace period."""
    me = os.getpid()
    ranks = process_tree.rank_groups(me, os.environ.get(protocol.RUN_DIR))
    process_tree.stop_groups(ranks - {me}, last=os.getpgrp())
    os._exit(128 + 15)


class _NoWait:
    """Stands for the event elastic's forked ranks wait on, after returning, until every rank has."""

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def set(self) -> None:
        pass

    def is_set(self) -> bool:
        return True


def _forked_ranks_end_when_done() -> None:
    from torch.distributed.elastic.multiprocessing import api

    if getattr(api._wrap, "_vdk_ends_when_done", False):
        return
    _original_wrap.append(api._wrap)
    api._wrap = _wrap


_original_wrap: list = []  # elastic's own _wrap, which `_wrap` calls
_FINISHED_READING = 7  # the position of elastic's queue_finished_reading_event among _wrap's arguments


def _wrap(*args, **kwargs) -> None:
    """elastic's `_wrap` in a forked rank: the rank's result is put on its queue (a pipe, written at
    once), then the rank ends without waiting for the others' (nor for threads its script left)."""
    from vdk.plugin.ml_training.runtime import rank_process

    args = (*args[:_FINISHED_READING], _NoWait(), *args[_FINISHED_READING + 1 :])
    _original_wrap[0](*args, **kwargs)
    sys.stdout.flush()
    sys.stderr.flush()
    rank_process.end_now(0)


_wrap._vdk_ends_when_done = True  # type: ignore[attr-defined]


def _plain_torch_log_format() -> None:
    plain = logging.Formatter("%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s")
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    for name in ["torch", *names]:
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(plain)


if __name__ == "__main__":
    main()
