"""Processes that a smoke rank starts with multiprocessing: the same smoke run inside them.

A script that starts its own workers (`mp.spawn(main, nprocs=torch.cuda.device_count())`) runs as one
launcher process; each worker it spawns is a training rank of the smoke run, with its own result file,
log and step limit. Fresh interpreters that multiprocessing starts ("spawn") get the smoke run's
stand-ins before the script is imported in them, so that module-level code sees the same virtual GPUs
as the launcher did.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from vdk.plugin.ml_training.runtime import protocol

_CHILD_PROGRAM = "from vdk.plugin.ml_training.runtime.spawned import child_main; child_main(%s)"
# torchrun tells its ranks to use its agent's store for env:// rendezvous; workers that a rank spawns
# meet on their own (the script's MASTER_ADDR/PORT), and with it their rank 0 would wait for a store
# that never comes.
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"


def forget_agent_store() -> None:
    """Before a process that torchrun started spawns workers that form their own process group."""
    os.environ.pop(AGENT_STORE, None)


def install_in_image(reports_progress: bool) -> None:
    """In a job image (and a full local run): mp.spawn workers of the launcher process form their own
    process group and each runs its own stall watchdog, while the launcher's stops (it only waits for
    them); when the launcher is the process that reports progress (rank 0), its worker 0 reports it instead."""
    from vdk.plugin.ml_training.runtime import post_import

    def patch(_torch: Any) -> None:
        global _original_image_wrap
        module = sys.modules.get("torch.multiprocessing.spawn")
        original = getattr(module, "start_processes", None)
        if original is None or getattr(original, "_vdk_forgets_agent_store", False):
            return

        def start_processes(*args: Any, **kwargs: Any) -> Any:
            from vdk.plugin.ml_training.runtime import watchdog

            forget_agent_store()
            watchdog.stop_current()
            if reports_progress:
                os.environ[protocol.SPAWNED_PROGRESS] = "1"
            return original(*args, **kwargs)

        start_processes._vdk_forgets_agent_store = True  # type: ignore[attr-defined]
        module.start_processes = start_processes  # type: ignore[union-attr]
        if hasattr(module, "_wrap"):
            _original_image_wrap = module._wrap  # type: ignore[union-attr]
            module._wrap = image_worker  # type: ignore[union-attr]

    post_import.when_imported("torch", patch)


_original_image_wrap: Any = None  # in a forked worker; a spawned one imports mp.spawn's own afresh


def image_worker(fn: Any, i: int, args: tuple, error_file: str) -> None:
    """In place of mp.spawn's `_wrap` in a job image and a full local run: every worker runs the stall
    watchdog, and worker 0 prints the progress lines (runtime/progress_lines.py) if its launcher would have."""
    original = _original_image_wrap or sys.modules["torch.multiprocessing.spawn"]._wrap
    from vdk.plugin.ml_training.runtime import bootstrap
    from vdk.plugin.ml_training.runtime import watchdog

    reporter = bootstrap._start_progress() if i == 0 and os.environ.get(protocol.SPAWNED_PROGRESS) else None
    settings = watchdog.WatchdogSettings.from_env()
    if reporter is None and not settings.on:
        original(fn, i, args, error_file)
        return
    from vdk.plugin.ml_training.runtime.steps import StepCounter

    counter = StepCounter().install()
    if reporter is not None:
        reporter.attach(counter)
    watch = watchdog.Watchdog(settings, str(i), lambda: counter.steps).start() if settings.on else None
    ended: list[BaseException | None] = []

    def run(index: int, *rest: Any) -> None:
        try:
            fn(index, *rest)
        except BaseException as e:  # noqa: B036 - the last line says how far it got, then mp.spawn's handling
            ended.append(e)
            raise
        ended.append(None)

    try:
        original(run, i, args, error_file)
    finally:
        if watch is not None:
            watch.stop()
        if reporter is not None:
            reporter.finish(bootstrap._ending(ended[0] if ended else None))


def install(adaptations: Any) -> None:
    """In a smoke rank: spawned interpreters start with the stand-ins; mp.spawn workers report as ranks."""
    import multiprocessing.spawn as mp_spawn
    import multiprocessing.util as mp_util

    def command_line(original):
        def get_command_line(**kwds: Any) -> list[str]:
            if getattr(sys, "frozen", False):
                return original(**kwds)
            program = _CHILD_PROGRAM % ", ".join(f"{name}={value!r}" for name, value in kwds.items())
            flags = mp_util._args_from_interpreter_flags()
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
    from vdk.plugin.ml_training.runtime import bootstrap

    run_dir = os.environ.get(protocol.RUN_DIR, "")
    bootstrap.guard_writes(run_dir)
    bootstrap.install_stand_ins(run_dir)
    from multiprocessing.spawn import spawn_main

    spawn_main(**kwds)


_original_wrap: Any = None


def worker(fn: Any, i: int, args: tuple, error_file: str) -> None:
    """Runs in place of torch.multiprocessing.spawn's `_wrap`: worker `i` of an mp.spawn call is rank `i`
    of the smoke run; it stops after smoke_steps optimizer steps like any rank."""
    from vdk.plugin.ml_training.runtime import bootstrap
    from vdk.plugin.ml_training.runtime.report import RankReport
    from vdk.plugin.ml_training.runtime.report import StepRecorder
    from vdk.plugin.ml_training.runtime.report import describe
    from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

    run_dir = os.environ[protocol.RUN_DIR]
    bootstrap._route_output(i, run_dir)
    bootstrap._dump_stacks_on_crash(protocol.stack_path(run_dir, i))
    report = RankReport(run_dir, i, i, steps=0)
    counter = bootstrap.smoke_step_counter()
    counter.listeners.insert(0, StepRecorder(report))
    outcome: dict[str, Any] = {}

    def run(index: int, *rest: Any) -> None:
        try:
            fn(index, *rest)
        except SmokeStepsReached:
            outcome["status"] = protocol.STOPPED
        except BaseException as e:  # noqa: B036 - reported, then mp.spawn's own handling goes on
            outcome["status"] = protocol.FAILED
            report.finish(protocol.FAILED, error=describe(e), **_facts(counter, protocol.FAILED))
            raise
        else:
            outcome["status"] = protocol.FINISHED

    original = _original_wrap or sys.modules["torch.multiprocessing.spawn"]._wrap
    original(run, i, args, error_file)  # exits with 1 after an exception, as under mp.spawn
    if outcome.get("status") == protocol.FAILED:  # a KeyboardInterrupt, which _wrap swallows
        _end_now(1)
    status = outcome.get("status", protocol.FINISHED)
    report.finish(status, **_facts(counter, status))
    bootstrap._end_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    _end_now(0)


def _facts(counter: Any, status: str) -> dict[str, Any]:
    """Steps, loss, the end of the epoch and the stand-ins this worker needed, for its result file."""
    from vdk.plugin.ml_training.runtime import bootstrap
    from vdk.plugin.ml_training.runtime.report import json_number

    facts: dict[str, Any] = {
        "steps": counter.steps,
        "last_loss": json_number(counter.loss()),
        "epoch_end": bootstrap.epoch_end(status).to_record(),
    }
    if bootstrap._stand_ins is not None:
        facts["adaptations"] = dict(bootstrap._stand_ins.counts)
        facts["observed"] = sorted(bootstrap._stand_ins.observed)
    return facts


def _end_now(code: int) -> None:
    """End the worker without an interpreter teardown (slow, and now and then aborting with gloo)."""
    import gc
    import multiprocessing

    gc.collect()  # a stopped DataLoader iterator shuts its workers down when collected
    for child in multiprocessing.active_children():
        child.terminate()
    os._exit(code)
