"""A rank of the smoke run: the smoke run's stand-ins in this process (once), its end, and the processes it
starts with multiprocessing, which are ranks of the smoke run too.

The end: the first optimizer step of the second epoch (epochs.py), or `smoke_steps` steps when epochs are
not cut. A script that starts its own workers (`mp.spawn(main, nprocs=torch.cuda.device_count())`) runs
as one launcher process; each worker it spawns is a training rank of the smoke run, with its own result
file, log and step limit. Fresh interpreters that multiprocessing starts ("spawn") get the smoke run's
stand-ins before the script is imported in them, so that module-level code sees the same virtual GPUs
as the launcher did. (In a full run, spawned_workers.py does the part of this that a full run needs.)

This process's stand-ins and step counter are kept here, in an imported module, so that every path of
the process finds the same ones: bootstrap.py, which torchrun runs as `__main__`, and a worker forked
from the rank.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import rank_process

if TYPE_CHECKING:  # imported when a smoke run needs them: they import torch
    from vdk.plugin.ml_training.runtime.patching import Adaptations
    from vdk.plugin.ml_training.runtime.steps import StepCounter

_CHILD_PROGRAM = "from vdk.plugin.ml_training.runtime.smoke_rank import child_main; child_main(%s)"

_stand_ins: Adaptations | None = None  # this process's smoke-run Adaptations, once installed
_smoke_counter: StepCounter | None = None  # and its StepCounter with the step limit
_original_wrap: Any = None  # torch.multiprocessing.spawn's own `_wrap`, which `worker` calls


def install_stand_ins(run_dir: str):
    """The smoke run's stand-ins in this process (once): virtual GPUs, device tracking, gloo, and the
    adaptations of Hugging Face and Lightning when the code imports them."""
    global _stand_ins
    if _stand_ins is not None:
        return _stand_ins
    import warnings

    from vdk.plugin.ml_training.runtime import cpu_shims
    from vdk.plugin.ml_training.runtime import hf_shims
    from vdk.plugin.ml_training.runtime import lightning_shims
    from vdk.plugin.ml_training.runtime import training_loops

    # the job's own code is compiled with its loops marked: the smoke run leaves its training loop (epochs.py)
    training_loops.install([os.getcwd(), *os.environ.get(protocol.CODE_DIRS, "").split(os.pathsep)])
    steps = int(os.environ.get(protocol.SMOKE_STEPS, "1"))
    gpus = int(os.environ.get(protocol.SMOKE_GPUS) or os.environ.get("LOCAL_WORLD_SIZE") or "1")
    adaptations = cpu_shims.install(gpus, track_devices=os.environ.get(protocol.DEVICE_TRACKING) != "0")
    cut_epochs = os.environ.get(protocol.EPOCH_END) != "0"
    home = os.environ.get(protocol.FIRST_START_DIR) or run_dir  # a second start resumes what the first wrote there
    hf_shims.install(adaptations, steps, os.path.join(home, "hf-output"), cut_epochs)
    processes = int(os.environ.get("LOCAL_WORLD_SIZE") or "1")
    lightning_shims.install(adaptations, processes, os.path.join(home, "lightning"))
    _spawn_ranks(adaptations)
    # DTensor's warning about the CPU mesh that stands for the GPU mesh concerns the smoke run, not the code
    warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support on cpu")
    _stand_ins = adaptations
    return adaptations


def step_counter(rank: int | str):
    """This process's step counter with the smoke run's end: at the first optimizer step of the second
    epoch (epochs.py), or after smoke_steps steps when epochs are not cut, or when another rank stopped
    (smoke_stop.py). A worker forked from a rank starts it afresh."""
    global _smoke_counter
    from vdk.plugin.ml_training.runtime import epochs
    from vdk.plugin.ml_training.runtime import hf_shims
    from vdk.plugin.ml_training.runtime import smoke_stop
    from vdk.plugin.ml_training.runtime.steps import StepCounter
    from vdk.plugin.ml_training.runtime.steps import StepLimit

    if _smoke_counter is not None:
        _smoke_counter.reset()
    else:
        _smoke_counter = StepCounter(manual_steps=True).install()
    steps = int(os.environ.get(protocol.SMOKE_STEPS, "1"))
    watch: Any = None
    if os.environ.get(protocol.EPOCH_END) == "0":
        StepLimit(steps).attach(_smoke_counter)
    else:
        watch = epochs.watch(_smoke_counter, steps, _stand_ins)
        watch.hold = _metric_not_reported()
        watch.announce = smoke_stop.announce_here
    hf_shims.count_with(_smoke_counter)
    smoke_stop.follow(_smoke_counter, rank, leave=None if watch is None else lambda: watch.end_training(follow=True))
    return _smoke_counter


def agreed_end(rank: int | str, status: str, raised: BaseException | None, steps: int) -> bool:
    """A rank that stopped as planned tells the others to stop (smoke_stop.py); one whose collective ended
    because another stopped (it left, and the connection closed) stopped too: True when that is this
    rank's end, whatever error it raised."""
    from vdk.plugin.ml_training.runtime import smoke_stop

    run_dir = os.environ.get(protocol.RUN_DIR, "")
    if status == protocol.STOPPED:
        smoke_stop.announce(run_dir, rank, steps)
        return True
    return raised is not None and smoke_stop.ended_by_peer(raised, run_dir) is not None


def epoch_end(status: str):
    """Whether this smoke rank reached the end of an epoch, and what ran after it (protocol.EpochEnd)."""
    from vdk.plugin.ml_training.runtime import epochs

    watch = epochs.active()
    if watch is None:
        off = os.environ.get(protocol.EPOCH_END) == "0"
        return protocol.EpochEnd(False, why_not=epochs.TURNED_OFF if off else "")
    return watch.result(finished=status == protocol.FINISHED)


def training_end(status: str):
    """Whether the code after this smoke rank's training loop ran, and what ran there (protocol.TrainingEnd)."""
    from vdk.plugin.ml_training.runtime import epochs

    watch = epochs.active()
    if watch is None:
        return protocol.TrainingEnd(False)
    return watch.training_end(finished=status == protocol.FINISHED)


def _metric_not_reported():
    """In a sweep's smoke trial: why training goes on past its end (the metric was not reported yet), else None.
    Every rank reads rank 0's metric file, so that they end together."""
    from vdk.plugin.ml_training.runtime import sweep_protocol

    name, path = os.environ.get(sweep_protocol.METRIC), os.environ.get(sweep_protocol.METRIC_FILE)
    if not name or not path:
        return None

    def pending() -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                if sweep_protocol.read_metric_lines(f.read().splitlines()):
                    return None
        except OSError:
            pass
        return f"the sweep's metric {name} was not reported yet (bounded by smoke_timeout)"

    return pending


def _spawn_ranks(adaptations: Any) -> None:
    """Spawned interpreters start with the stand-ins (`child_main`); mp.spawn workers report as ranks (`worker`)."""
    import multiprocessing.spawn as mp_spawn
    import multiprocessing.util as mp_util

    def command_line(original):
        def get_command_line(**kwds: Any) -> list[str]:
            if getattr(sys, "frozen", False):
                return original(**kwds)
            program = _CHILD_PROGRAM % ", ".join(f"{name}={value!r}" for name, value in kwds.items())
            flags = mp_util._args_from_interpreter_flags()  # type: ignore[attr-defined]  # subprocess's, not in typeshed
            return [mp_spawn.get_executable(), *flags, "-c", program, "--multiprocessing-fork"]

        return get_command_line

    adaptations.replace(mp_spawn, "get_command_line", command_line)
    torch_spawn = sys.modules.get("torch.multiprocessing.spawn")  # the name `spawn` is the function
    if torch_spawn is not None and hasattr(torch_spawn, "_wrap"):
        global _original_wrap
        _original_wrap = torch_spawn._wrap
        adaptations.replace(torch_spawn, "_wrap", lambda original: worker)


def child_main(**kwds: Any) -> None:
    """Entry of a process that multiprocessing spawned from a smoke rank (a fresh interpreter)."""
    run_dir = os.environ.get(protocol.RUN_DIR, "")
    rank_process.guard_writes(run_dir)
    install_stand_ins(run_dir)
    from multiprocessing.spawn import spawn_main

    spawn_main(**kwds)


def worker(fn: Any, i: int, args: tuple, error_file: str) -> None:
    """Runs in place of torch.multiprocessing.spawn's `_wrap`: worker `i` of an mp.spawn call is rank `i`
    of the smoke run; it stops after smoke_steps optimizer steps like any rank, and ends as a rank does."""
    from vdk.plugin.ml_training.runtime.report import RankReport
    from vdk.plugin.ml_training.runtime.report import StepRecorder
    from vdk.plugin.ml_training.runtime.report import describe
    from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

    run_dir = os.environ[protocol.RUN_DIR]
    rank_process.route_output(i, run_dir)
    rank_process.dump_stacks_on_crash(protocol.stack_path(run_dir, i))
    # torch's workers get SIGINT when their launcher ends (its PR_SET_PDEATHSIG; the run's timeout stops the
    # launcher): where the worker was then, in the job's code, is where it hung
    rank_process.dump_stacks_again_on(signal.SIGINT)
    launcher = os.getppid()
    report = RankReport(run_dir, i, i, steps=0)
    counter = step_counter(i)
    counter.listeners.insert(0, StepRecorder(report))
    outcome: dict[str, Any] = {}

    def run(index: int, *rest: Any) -> None:
        try:
            fn(index, *rest)
        except SmokeStepsReached:
            outcome["status"] = protocol.STOPPED
            agreed_end(i, protocol.STOPPED, None, counter.steps)
        except BaseException as e:  # reported, then mp.spawn's own handling goes on
            if isinstance(e, KeyboardInterrupt) and os.getppid() != launcher:  # its launcher ended: not its failure
                outcome["status"] = protocol.RUNNING  # unfinished: the run's timeout says why, its stack where
                return
            if rank_process.ending(e) == protocol.FINISHED:  # sys.exit(0): an ordinary end
                outcome["status"] = protocol.FINISHED
                return
            if agreed_end(i, protocol.FAILED, e, counter.steps):
                outcome["status"] = protocol.STOPPED  # its collective ended when another worker stopped
                return
            outcome["status"] = protocol.FAILED
            report.finish(protocol.FAILED, error=describe(e), **_facts(counter, protocol.FAILED))
            raise
        else:
            outcome["status"] = protocol.FINISHED

    original = _original_wrap or sys.modules["torch.multiprocessing.spawn"]._wrap
    original(run, i, args, error_file)  # exits with 1 after an exception, as under mp.spawn
    if outcome.get("status") in (protocol.FAILED, protocol.RUNNING):  # a KeyboardInterrupt, which _wrap swallows
        rank_process.end_now(1)
    status = outcome.get("status", protocol.FINISHED)
    if status == protocol.STOPPED:  # its RPC peers wait in rpc.shutdown() for it
        rank_process.end_rpc()
    report.finish(status, **_facts(counter, status))
    if status == protocol.FINISHED:  # a stopped worker's peers may still be in a collective with it
        rank_process.end_process_group()
        rank_process.end(0)  # as python would up to its teardown, and without it (a finished worker never fails)
    rank_process.end_now(0)


def _facts(counter: Any, status: str) -> dict[str, Any]:
    """Steps, loss, the end of the epoch and the stand-ins this worker needed, for its result file."""
    from vdk.plugin.ml_training.runtime.report import json_number

    counter.settle()
    facts: dict[str, Any] = {
        "steps": counter.steps,
        "last_loss": json_number(counter.loss()),
        "epoch_end": epoch_end(status).to_record(),
        "training_end": training_end(status).to_record(),
    }
    if _stand_ins is not None:
        facts["adaptations"] = dict(_stand_ins.counts)
        facts["observed"] = sorted(_stand_ins.observed)
    return facts
