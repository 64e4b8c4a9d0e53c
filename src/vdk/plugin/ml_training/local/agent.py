"""torchrun for local runs: `python -m vdk.plugin.ml_training.local.agent [torchrun flags] ...`.

Exactly what the `torchrun` console script does (`torch.distributed.run.main()`), with two
differences that only save time: torch's log formatter, which imports torch._dynamo (over 1 s) to
format the first exception it logs, is replaced by a plain one; and the process ends at once
instead of spending 0.3-1 s tearing down an interpreter that imported torch. Its exit code is
torchrun's; its log goes to the launcher's agent.log.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback


def main() -> None:
    code = 1
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


def _plain_torch_log_format() -> None:
    plain = logging.Formatter("%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s")
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    for name in ["torch", *names]:
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(plain)


if __name__ == "__main__":
    main()
