"""The program every training process runs: `python -m vdk.plugin.ml_training.runtime.bootstrap
ENTRYPOINT [ARGS...]`, where ENTRYPOINT is `script.py` or `-m package.module`, under torchrun.

In a job image it runs the user's code exactly as `python script.py` / `python -m module` would, and
rank 0 prints progress lines (runtime/progress_lines.py); every rank runs the stall watchdog
(runtime/watchdog.py). Under the local launcher (VDK_ML_TRAINING_MODE set) it also keeps the output of
ranks other than 0 in log files, reports how the rank ended in a result file (the launcher shows the
failing rank's traceback once), keeps its writes out of the job directory (job_dir_protection.py), and in smoke
mode installs the CPU stand-ins and the smoke run's end (the first optimizer step of the second epoch,
epochs.py) instead of progress lines and the watchdog (a smoke run has its own timeout).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import types

# Full runs: seconds between two updates of a rank's step count in its result file.
FULL_RUN_RECORD_SECONDS = 5.0


class _FollowsMain(types.ModuleType):
    """`__mp_main__` as seen by unpickling: whatever module is `__main__` right now.

    multiprocessing aliases `__mp_main__` to `__main__` when it is first imported. That happens
    before the user's script runs when the process was forked from torchrun's agent (or torch was
    imported first), so results that spawned workers send back ("__mp_main__.Point") would be looked
    up in the launcher's module instead of the script's."""

    def __getattr__(self, name: str):
        return getattr(sys.modules["__main__"], name)


def run_entrypoint(entry: list[str]) -> None:
    """Run `script.py ARGS` or `-m module ARGS` in this interpreter, as `python` would run it."""
    sys.modules["__mp_main__"] = _FollowsMain("__mp_main__")
    if not entry:
        raise SystemExit("bootstrap: no entrypoint given (expected `script.py ARGS` or `-m module ARGS`)")
    if entry[0] == "-m":
        if len(entry) < 2:
            raise SystemExit("bootstrap: -m needs a module name")
        sys.argv = [entry[1], *entry[2:]]  # run_module sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(entry[0])
        sys.argv = [script, *entry[1:]]
        sys.path[0] = os.path.dirname(script)
        # runpy installs a fresh module as sys.modules["__main__"] while the script runs, so classes
        # the script defines pickle (DataLoader workers, multiprocessing) as they do under `python`.
        runpy.run_path(script, run_name="__main__")


def main(argv: list[str] | None = None) -> int:
    entry = list(sys.argv[1:] if argv is None else argv)
    from vdk.plugin.ml_training.runtime import loader_workers
    from vdk.plugin.ml_training.runtime import protocol

    loader_workers.install()  # in every mode: a rank that dies early must not hang the run
    mode = os.environ.get(protocol.MODE)
    run_dir = os.environ.get(protocol.RUN_DIR)
    if not mode or not run_dir:
        _run_in_image(entry)
        return 0
    return _run_locally(entry, mode, run_dir)


def _run_in_image(entry: list[str]) -> None:
    """The user's code and nothing else, but for the progress lines of rank 0, every rank's stall
    watchdog (and workers spawned by a launcher process forming their own process group:
    runtime/spawned.py), and what the job's environment asks for: the CPU adaptations, parameter
    checksums."""
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime import spawned

    rank = _global_rank()
    outputs = _enter_output_dir()
    spawned.install_in_image(reports_progress=rank == 0)
    adaptations = _adapt_to_cpu() if protocol.switched_on(protocol.ADAPT_TO_CPU) else None
    reporter = _start_progress() if rank == 0 else None
    checksum = _checksum()
    counters: list = []  # the StepCounter, once the code imported torch
    watch = _start_watchdog(counters)
    if reporter is None and watch is None and checksum is None and outputs is None:
        run_entrypoint(entry)
    else:
        _when_torch_is_imported(counters.append, *[x.attach for x in (reporter, checksum) if x is not None])
        try:
            run_entrypoint(entry)
        except BaseException as e:  # noqa: B036 - the last line says how far it got, then the error goes on
            _stop(watch)
            if reporter is not None:
                reporter.finish(_ending(e))
            if _ending(e) == protocol.FINISHED:
                _end_lines(rank, checksum, adaptations)
            _report_outputs(rank, outputs)
            raise
        _stop(watch)
        if reporter is not None:
            reporter.finish(_ending(None))
    _end_lines(rank, checksum, adaptations)
    _report_outputs(rank, outputs)
    if adaptations is not None:
        _end_after_exit_handlers()


def _enter_output_dir() -> str | None:
    """The run's output directory as the working directory, the job's code linked into it (output_workdir.py).
    A run whose outputs would be lost stops here, saying why."""
    from vdk.plugin.ml_training.runtime import output_workdir

    try:
        return output_workdir.enter_output_dir()
    except OSError as e:
        _write_line(
            f"[vdk-ml-training] error: cannot work in the output directory {output_workdir.output_dir()}: {e}. "
            "Check that the output claim (output_pvc) is writable by the pod's user, and not full"
        )
        raise SystemExit(1) from None


def _report_outputs(rank: int, outputs: str | None) -> None:
    if outputs is not None and rank == 0:
        from vdk.plugin.ml_training.runtime import output_workdir

        output_workdir.report(outputs)


def _end_after_exit_handlers() -> None:
    """End a rank whose NCCL became gloo once the script's `atexit` handlers ran, without the rest of the
    interpreter's teardown: with gloo, it now and then aborts ("terminate called without an active
    exception") after the script has ended well."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _adapt_to_cpu():
    """The smoke run's CPU adaptations without its step limit (VDK_ML_TRAINING_ADAPT_TO_CPU): each process
    sees its node's processes as virtual GPUs, gloo for NCCL, full precision. Device tracking, a check of
    the smoke run that costs time on every operation, stays off."""
    from vdk.plugin.ml_training.runtime import cpu_shims
    from vdk.plugin.ml_training.runtime import hf_shims

    adaptations = cpu_shims.install(int(os.environ.get("LOCAL_WORLD_SIZE") or "1"), track_devices=False)
    hf_shims.install(adaptations, None, None)
    return adaptations


def _checksum():
    """A ParameterChecksum when VDK_ML_TRAINING_PARAMETER_CHECKSUM asks for one."""
    from vdk.plugin.ml_training.runtime import protocol

    if not protocol.switched_on(protocol.PARAMETER_CHECKSUM):
        return None
    from vdk.plugin.ml_training.runtime.checksum import ParameterChecksum

    return ParameterChecksum()


def _end_lines(rank: int, checksum, adaptations) -> None:
    """After a script that ended well: this rank's parameter checksum; rank 0 names the CPU adaptations."""
    if checksum is not None:
        from vdk.plugin.ml_training.runtime.checksum import format_line

        taken = checksum.take(rank)
        if taken is not None:
            _write_line(format_line(taken))
    if adaptations is not None and rank == 0 and adaptations.counts:
        _write_line(f"[vdk-ml-training] adapted for CPU: {', '.join(adaptations.counts)}")


def _write_line(line: str) -> None:
    """One write with its newline: the ranks of a node share stdout, and under PYTHONUNBUFFERED print()
    writes the text and the newline apart, so two ranks' lines could merge."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _run_locally(entry: list[str], mode: str, run_dir: str) -> int:
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime.report import RankReport
    from vdk.plugin.ml_training.runtime.report import StepRecorder
    from vdk.plugin.ml_training.runtime.report import describe
    from vdk.plugin.ml_training.runtime.report import describe_exit
    from vdk.plugin.ml_training.runtime.report import json_number
    from vdk.plugin.ml_training.runtime.report import report_argument_errors

    rank = _global_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # a script that spawns its own workers runs as one launcher process; its workers are the ranks
    name = protocol.LAUNCHER if os.environ.get(protocol.SPAWNED_WORKERS) else rank
    guard_writes(run_dir)
    report_argument_errors()
    _route_output(rank, run_dir)
    _reset_signals()
    _die_with_parent()
    _dump_stacks_on_crash(protocol.stack_path(run_dir, name))
    # smoke runs count steps from the start: a rank that never steps has taken 0, not an unknown number
    report = RankReport(run_dir, name, local_rank, **({"steps": 0} if mode == protocol.SMOKE else {}))

    adaptations = reporter = watch = None
    checksum = _checksum()
    counters: list = []  # the StepCounter, once there is one
    stopped_at_limit: tuple = ()  # the smoke run's SmokeStepsReached; full runs import no torch here
    if mode == protocol.SMOKE:
        from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

        counter, adaptations = _install_smoke(run_dir)
        counter.listeners.insert(0, StepRecorder(report))  # a handful of steps: each one recorded
        if checksum is not None:
            counter.listeners.insert(0, checksum.on_step)  # before the step limit ends the script
        counters.append(counter)
        stopped_at_limit = (SmokeStepsReached,)
    else:  # full: every rank counts its steps for the summary and runs the watchdog; rank 0 prints progress lines
        from vdk.plugin.ml_training.runtime import spawned

        spawned.install_in_image(reports_progress=False)
        reporter = _start_progress() if rank == 0 else None
        if protocol.switched_on(protocol.ADAPT_TO_CPU):
            adaptations = _adapt_to_cpu()

        def record_steps(counter) -> None:
            counter.listeners.append(StepRecorder(report, period=FULL_RUN_RECORD_SECONDS))

        def record_stall(stall) -> None:  # the device is not asked for the loss: it may hang too
            report.finish(protocol.STALLED, stall=stall.to_dict(), steps=counters[0].steps if counters else 0)

        receivers = [x.attach for x in (reporter, checksum) if x is not None]
        _when_torch_is_imported(counters.append, record_steps, *receivers)
        watch = _start_watchdog(counters, record_stall)

    status, error, code = protocol.FINISHED, None, 0
    try:
        run_entrypoint(entry)
    except stopped_at_limit:
        status = protocol.STOPPED
    except SystemExit as e:
        if e.code not in (None, 0):
            status, code = protocol.FAILED, 1
            error = describe_exit(e)
    except BaseException as e:  # noqa: B036 - KeyboardInterrupt too: reported, not printed
        status, code = protocol.FAILED, 1
        error = describe(e)
    _stop(watch)
    if status != protocol.FAILED and checksum is not None:
        _end_lines(rank, checksum, None)
    fields: dict = {"error": error}
    if counters:
        fields.update(steps=counters[0].steps, last_loss=json_number(counters[0].loss()))
    if mode == protocol.SMOKE:
        fields["epoch_end"] = epoch_end(status).to_record()
    if reporter is not None:
        reporter.finish(status)
        fields["progress"] = reporter.last_line
    if adaptations is not None:
        fields["adaptations"] = dict(adaptations.counts)
        fields["observed"] = sorted(adaptations.observed)
    if status != protocol.FAILED:
        _end_process_group()
    report.finish(status, **fields)
    sys.stdout.flush()
    sys.stderr.flush()
    if mode == protocol.SMOKE:
        _skip_teardown(code)
    return code


def _global_rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _ending(error: BaseException | None) -> str:
    """How the script ended, as a protocol status: `sys.exit(0)` is an ordinary end."""
    from vdk.plugin.ml_training.runtime import protocol

    if error is None or (isinstance(error, SystemExit) and error.code in (None, 0)):
        return protocol.FINISHED
    return protocol.FAILED


def _start_progress():
    """Progress lines of this process (rank 0), or None when they are off."""
    from vdk.plugin.ml_training.runtime import progress_lines

    try:
        return progress_lines.start()
    except Exception as e:  # noqa: BLE001 - no progress lines, but the user's code runs as ever
        sys.stderr.write(f"[vdk-ml-training] warning: no progress lines ({type(e).__name__}: {e})\n")
        return None


def _start_watchdog(counters: list, on_stall=None):
    """This rank's stall watchdog over the step counter that `counters` will hold, or None when it is off."""
    from vdk.plugin.ml_training.runtime import watchdog

    try:
        return watchdog.start(str(_global_rank()), lambda: counters[0].steps if counters else 0, on_stall)
    except Exception as e:  # noqa: BLE001 - no watchdog, but the user's code runs as ever
        sys.stderr.write(f"[vdk-ml-training] warning: no stall watchdog ({type(e).__name__}: {e})\n")
        return None


def _stop(watch) -> None:
    """The script ended: what it does from here on (teardown) is not training."""
    if watch is not None:
        watch.stop()


def _when_torch_is_imported(*then) -> None:
    """Count optimizer steps from the moment the user's code imports torch (not before: a script may
    set torch's environment variables first, and multiprocessing must see the script as __main__),
    and hand the counter to each of `then`."""
    from vdk.plugin.ml_training.runtime import post_import

    def install(_torch) -> None:
        try:
            from vdk.plugin.ml_training.runtime.steps import StepCounter

            counter = StepCounter().install()
            for receive in then:
                receive(counter)
        except Exception as e:  # noqa: BLE001 - the user's `import torch` must not fail because of us
            sys.stderr.write(f"[vdk-ml-training] warning: optimizer steps are not counted ({type(e).__name__}: {e})\n")

    post_import.when_imported("torch", install)


def _skip_teardown(code: int) -> None:
    """End a smoke rank that torchrun started as a fresh interpreter now: the run is over, and the
    teardown of an interpreter that loaded torch takes 0.3-1 s and, with gloo, now and then aborts
    ("terminate called without an active exception"). A rank forked from torchrun's agent returns
    instead: multiprocessing reports its result to the agent and then ends it the same way."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return
    import gc

    gc.collect()  # a stopped DataLoader iterator shuts its workers down when collected
    for child in multiprocessing.active_children():
        child.terminate()
    os._exit(code)


def _install_smoke(run_dir: str):
    adaptations = install_stand_ins(run_dir)
    return smoke_step_counter(), adaptations


def guard_writes(run_dir: str) -> None:
    """Under the local launcher, nothing this process writes reaches the job directory (job_dir_protection.py)."""
    from vdk.plugin.ml_training.runtime import protocol

    job_dir = os.environ.get(protocol.JOB_DIR)
    if job_dir:
        from vdk.plugin.ml_training.runtime import job_dir_protection

        job_dir_protection.install(job_dir, os.getcwd(), run_dir)


_stand_ins = None  # this process's smoke-run Adaptations, once installed
_smoke_counter = None  # and its StepCounter with the step limit


def epoch_end(status: str):
    """Whether this smoke rank reached the end of an epoch, and what ran after it (protocol.EpochEnd)."""
    from vdk.plugin.ml_training.runtime import epochs
    from vdk.plugin.ml_training.runtime import protocol

    watch = epochs.active()
    if watch is None:
        off = os.environ.get(protocol.EPOCH_END) == "0"
        return protocol.EpochEnd(False, why_not=epochs.TURNED_OFF if off else "")
    return watch.result(finished=status == protocol.FINISHED)


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
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime import spawned

    steps = int(os.environ.get(protocol.SMOKE_STEPS, "1"))
    gpus = int(os.environ.get(protocol.SMOKE_GPUS) or os.environ.get("LOCAL_WORLD_SIZE") or "1")
    adaptations = cpu_shims.install(gpus, track_devices=os.environ.get(protocol.DEVICE_TRACKING) != "0")
    cut_epochs = os.environ.get(protocol.EPOCH_END) != "0"
    hf_shims.install(adaptations, steps, os.path.join(run_dir, "hf-output"), cut_epochs)
    processes = int(os.environ.get("LOCAL_WORLD_SIZE") or "1")
    lightning_shims.install(adaptations, processes, os.path.join(run_dir, "lightning"))
    spawned.install(adaptations)
    # DTensor's warning about the CPU mesh that stands for the GPU mesh concerns the smoke run, not the code
    warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support on cpu")
    _stand_ins = adaptations
    return adaptations


def smoke_step_counter():
    """This process's step counter with the smoke run's end: at the first optimizer step of the second
    epoch (epochs.py), or after smoke_steps steps when epochs are not cut. A worker forked from a rank
    starts it afresh."""
    global _smoke_counter
    from vdk.plugin.ml_training.runtime import epochs
    from vdk.plugin.ml_training.runtime import hf_shims
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime.steps import StepCounter
    from vdk.plugin.ml_training.runtime.steps import StepLimit

    if _smoke_counter is not None:
        _smoke_counter.reset()
    else:
        _smoke_counter = StepCounter().install()
    steps = int(os.environ.get(protocol.SMOKE_STEPS, "1"))
    if os.environ.get(protocol.EPOCH_END) == "0":
        StepLimit(steps).attach(_smoke_counter)
    else:
        epochs.watch(_smoke_counter, steps, _stand_ins)
    hf_shims.count_with(_smoke_counter)
    return _smoke_counter


def _route_output(rank: int, run_dir: str) -> None:
    """Rank 0 talks to the user's console; the others write to rank-<N>.log."""
    from vdk.plugin.ml_training.runtime import protocol

    sys.stdout.flush()
    sys.stderr.flush()
    if rank != 0:
        fd = os.open(protocol.log_path(run_dir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return
    console = os.environ.get(protocol.CONSOLE_STDERR)
    try:  # non-blocking open: fails at once instead of hanging if nobody reads the FIFO
        if not console:
            raise OSError("no console given")
        fd = os.open(console, os.O_WRONLY | os.O_NONBLOCK | os.O_APPEND)
        os.set_blocking(fd, True)
    except OSError:
        os.dup2(1, 2)  # better on stdout than hidden in torchrun's log
        return
    os.dup2(fd, 2)
    os.close(fd)


def _reset_signals() -> None:
    """A rank forked from torchrun's agent inherits its handlers; a script expects Python's defaults."""
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _die_with_parent() -> None:
    """If torchrun's agent dies, even by SIGKILL, this rank follows (Linux; elsewhere the launcher
    kills ranks it knows)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _dump_stacks_on_crash(path):
    """Python stacks of every thread into rank-<N>.stack on a fatal signal or on SIGTERM (a timeout):
    where a hung or crashed rank was."""
    import faulthandler

    f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - stays open: faulthandler writes to it until exit
    faulthandler.enable(file=f, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=f, all_threads=True, chain=True)


def _end_process_group() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the run's outcome is already known; cleanup must not change it
        pass


if __name__ == "__main__":
    sys.exit(main())
