"""Workers that a training process of a full run (a job image, a full local run) starts with
`torch.multiprocessing` (mp.spawn): they form their own process group, and each runs its own stall
watchdog while the launcher process's stops (it only waits for them); when the launcher is the process
that reports progress (rank 0), its worker 0 reports it instead.

In a smoke run, the workers are ranks of the smoke run instead (smoke_rank.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import rank_process

_original_wrap: Any = None  # in a forked worker; a spawned one imports mp.spawn's own afresh


def install(reports_progress: bool) -> None:
    """Once the code imports torch: mp.spawn's workers run `worker`; `reports_progress`: this process is
    the one that prints progress lines, which its worker 0 then does instead."""
    from vdk.plugin.ml_training.runtime import post_import

    def patch(_torch: Any) -> None:
        global _original_wrap
        module: Any = sys.modules.get("torch.multiprocessing.spawn")  # patched by attribute
        original = getattr(module, "start_processes", None)
        if original is None or getattr(original, "_vdk_forgets_agent_store", False):
            return

        def start_processes(*args: Any, **kwargs: Any) -> Any:
            from vdk.plugin.ml_training.runtime import watchdog

            rank_process.forget_agent_store()
            watchdog.stop_current()
            if reports_progress:
                from vdk.plugin.ml_training.runtime import series

                os.environ[protocol.SPAWNED_PROGRESS] = "1"
                series.stand_down_current()  # worker 0 records the series instead
            return original(*args, **kwargs)

        start_processes._vdk_forgets_agent_store = True  # type: ignore[attr-defined]  # attribute of a function object
        module.start_processes = start_processes
        if hasattr(module, "_wrap"):
            _original_wrap = module._wrap
            module._wrap = worker

    post_import.when_imported("torch", patch)


def worker(fn: Any, i: int, args: tuple, error_file: str) -> None:
    """In place of mp.spawn's `_wrap` in a job image and a full local run: every worker runs the stall
    watchdog, and worker 0 prints the progress lines (runtime/progress_lines.py) if its launcher would have.
    A worker whose function ended (or called sys.exit) ends as a rank does (rank_process.end): its exit handlers
    run, its outputs are flushed, and no crash in a library's teardown fails it."""
    original = _original_wrap or sys.modules["torch.multiprocessing.spawn"]._wrap
    from vdk.plugin.ml_training.runtime import watchdog

    reporter = rank_process.start_progress() if i == 0 and os.environ.get(protocol.SPAWNED_PROGRESS) else None
    series = None
    if reporter is not None:
        rank_process.report_to_kubeflow(reporter)  # worker 0 reports the TrainJob's status in its launcher's place
        series = rank_process.start_series()  # and records the run's series
        rank_process.follow_shown(series)
    settings = watchdog.WatchdogSettings.from_env()
    watch = None
    ended: list[BaseException | None] = []
    run = fn
    if reporter is not None or settings.on:
        from vdk.plugin.ml_training.runtime.steps import StepCounter

        counter = StepCounter().install()
        if reporter is not None:
            reporter.attach(counter)
        if series is not None:
            series.attach(counter)
        watch = watchdog.Watchdog(settings, str(i), lambda: counter.steps).start() if settings.on else None

        def run(index: int, *rest: Any) -> None:
            try:
                fn(index, *rest)
            except BaseException as e:  # the last line says how far it got, then mp.spawn's handling
                ended.append(e)
                raise
            ended.append(None)

    try:
        original(run, i, args, error_file)  # after an exception: its traceback to the parent, then sys.exit(1)
    except SystemExit as e:
        code = rank_process.exit_status(e) or 0
        rank_process.say_exit_message(e)
    else:
        code = 0
    finally:
        if watch is not None:
            watch.stop()
        if reporter is not None:
            reporter.finish(rank_process.ending(ended[0] if ended else None))
        rank_process.finish_series(series, ended[0] if ended else None)
    rank_process.end(code)
