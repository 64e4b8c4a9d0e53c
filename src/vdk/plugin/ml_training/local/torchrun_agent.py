"""torchrun for local runs: `python -m vdk.plugin.ml_training.local.torchrun_agent [torchrun flags] ...`.

Exactly what the `torchrun` console script does (`torch.distributed.run.main()`), its agents leaving
torch's exit barrier together as every pod's do (runtime/torchrun_launch.py: one code path; a local run
has one agent, so the race it closes cannot happen here), with three differences: torch's log formatter,
which imports torch._dynamo (over 1 s) to format the first
exception it logs, is replaced by a plain one; the process ends at once instead of spending 0.3-1 s
tearing down an interpreter that imported torch; and a rank forked from it ends as soon as it has
returned its result, instead of staying until every rank has (torch's elastic agent keeps it waiting):
a smoke rank that stopped leaves its peers' collectives (its connections close) instead of leaving
them hanging in one until the timeout (runtime/smoke_stop.py). Its exit code is torchrun's; its log
goes to the launcher's agent.log.

Around it, what keeps a local run in its place:
- before anything else, the job directory becomes read-only for the agent and everything below it, when the
  launcher asks (local/job_dir_mount.py);
- the agent is a child subreaper: a daemon that a rank double-forks is adopted by it, not by init, so that
  every process of the run stays below it; when the run ends, whatever is left below it is stopped;
- it holds the run's end of `vdk`'s lifeline (local/lifeline.py): when `vdk` is gone, however it ended
  (SIGKILL included), the agent stops every process below it and itself, so that nothing outlives `vdk`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

from vdk.plugin.ml_training.local import job_dir_mount
from vdk.plugin.ml_training.local import lifeline
from vdk.plugin.ml_training.local import process_tree
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import torchrun_launch


def main() -> None:
    code = 1
    try:  # first, while this process has a single thread: a user namespace needs it
        job_dir_mount.protect_from_environment()
    except OSError as e:
        sys.stderr.write(f"vdk-ml-training: cannot make the job directory read-only for the run: {e}\n")
        os._exit(1)
    if process_tree.become_subreaper():
        _watch_leftovers(os.environ.get(protocol.RUN_DIR))
    lifeline.watch(_stop_the_run)
    try:
        from torch.distributed.run import main as torchrun

        _plain_torch_log_format()
        torchrun_launch.make_exit_barrier_safe()
        _forked_ranks_end_when_done()
        torchrun()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - ChildFailedError, SignalException, KeyboardInterrupt: logged, exit 1
        traceback.print_exc()
    finally:
        _stop_what_is_left()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stop_the_run() -> None:
    """`vdk` is gone: SIGTERM to every rank (forked ranks share this process's group; spawned ones have
    their own sessions) and every process below this one, SIGKILL after the grace period; then this process
    ends."""
    me = os.getpid()
    ranks = process_tree.rank_groups(me, os.environ.get(protocol.RUN_DIR))
    process_tree.stop_tree(me, ranks - {me, os.getpgrp()}, include_root=False)
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
    once), then the rank ends without waiting for the others' and without a teardown (the script's threads and
    exit handlers were done by the bootstrap when it finished; a script cut short has none to wait for)."""
    from vdk.plugin.ml_training.runtime import rank_process

    args = (*args[:_FINISHED_READING], _NoWait(), *args[_FINISHED_READING + 1 :])
    _original_wrap[0](*args, **kwargs)
    rank_process.end_now(0)


_wrap._vdk_ends_when_done = True  # type: ignore[attr-defined]  # attribute of a function object


def _watch_leftovers(run_dir: str | None) -> None:
    """While the run lasts: what a rank that ended left behind (a daemon it started, adopted by this process)
    is stopped. It may hold the rank's end of a pipe that torchrun waits on to see the rank end (forked ranks),
    and would keep torchrun from ever seeing it."""
    if not run_dir:
        return
    me = os.getpid()
    expected = _local_ranks(sys.argv[1:])

    def watch() -> None:
        while True:
            time.sleep(0.5)
            records: dict[int | str, dict] = dict(protocol.read_results(run_dir).items())
            launcher = protocol.read_launcher(run_dir)  # a script that spawns its workers: what it starts is its own
            if launcher is not None:
                records[protocol.LAUNCHER] = launcher
            ranks = {rank: record["pid"] for rank, record in records.items() if isinstance(record.get("pid"), int)}
            for pid in process_tree.leftovers_of_ended_ranks(me, ranks, expected):
                process_tree.stop_tree(pid)

    threading.Thread(target=watch, name="vdk-ml-leftovers", daemon=True).start()


def _local_ranks(argv: list[str]) -> int:
    """The number of ranks torchrun starts here (its --nproc-per-node)."""
    for index, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            text = value or (argv[index + 1] if index + 1 < len(argv) else "")
            return int(text) if text.isdigit() else 1
    return 1


def _stop_what_is_left() -> None:
    """torchrun has ended: a process still below this one (a rank's daemon, a worker it left) goes too."""
    me = os.getpid()
    if process_tree.descendants(me):
        process_tree.stop_tree(me, include_root=False)
    process_tree.reap()


def _plain_torch_log_format() -> None:
    plain = logging.Formatter("%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s")
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    for name in ["torch", *names]:
        for handler in logging.getLogger(name).handlers:
            handler.setFormatter(plain)


if __name__ == "__main__":
    main()
