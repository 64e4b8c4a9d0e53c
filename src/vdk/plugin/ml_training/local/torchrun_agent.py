"""torchrun for local runs: `python -m vdk.plugin.ml_training.local.torchrun_agent [torchrun flags] ...`.

Exactly what the `torchrun` console script does (`torch.distributed.run.main()`), with two
differences that only save time: torch's log formatter, which imports torch._dynamo (over 1 s) to
format the first exception it logs, is replaced by a plain one; and the process ends at once
instead of spending 0.3-1 s tearing down an interpreter that imported torch. Its exit code is
torchrun's; its log goes to the launcher's agent.log.

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


def _plain_torch_log_format() -> None:
    plain = logging.Formatter("%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s")
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    for name in ["torch", *names]:
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(plain)


if __name__ == "__main__":
    main()
