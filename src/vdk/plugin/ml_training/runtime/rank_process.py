"""What a training process does as it starts and as it ends, whoever started it: torchrun (the launcher
path, bootstrap.py) or multiprocessing (the workers a script spawns: smoke_rank.py in a smoke run,
spawned_workers.py in a full run).

At the start: its output routed (rank 0 to the console, the others to their log file), its Python stacks
dumped on a crash or a timeout, its writes kept out of the job directory, signals as a script expects
them, its end tied to its parent's, its progress lines (and a TrainJob's Kubeflow status), stall watchdog
and (on a node's local rank 0) GPU sampler started, its steps counted once the code imports torch. At the
end: the status a script's end means, the process group destroyed, and the process's end (`end`, `end_now`).
Standard library at import; what a helper needs (torch, the watchdog, progress lines, NVML) is imported when it
is called.

The end of a script that returned (or called sys.exit) is what `python script.py` does up to its teardown —
the script's non-daemon threads waited for, its `atexit` handlers run (logging's flush at exit among them),
the files it left open closed, stdout, stderr and C's stdio flushed — and then `os._exit` with the script's
own exit code. The teardown that follows in a plain interpreter (C++ destructors of the libraries it loaded,
module finalizers) is skipped: nothing the script wrote depends on it any more, and with gloo it now and then
aborts ("terminate called without an active exception"), which would turn a rank that finished into a failed
one, and a finished run into a failed one. A crash before the script returned is reported as ever.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import IO
from typing import NoReturn

from vdk.plugin.ml_training.vocabulary import wire

# torchrun tells its ranks to use its agent's store for env:// rendezvous; workers that a rank spawns
# meet on their own (the script's MASTER_ADDR/PORT), and with it their rank 0 would wait for a store
# that never comes.
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"

_stack_file: IO[str] | None = None  # faulthandler's file of this process (dump_stacks_on_crash): open to the end
_script_ended = False  # finish_script has run in this process


def global_rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def forget_agent_store() -> None:
    """Before a process that torchrun started spawns workers that form their own process group."""
    os.environ.pop(AGENT_STORE, None)


def guard_writes(run_dir: str) -> None:
    """Under the local launcher, nothing this process writes reaches the job directory (job_dir_protection.py)."""
    from vdk.plugin.ml_training.runtime import protocol

    job_dir = os.environ.get(protocol.JOB_DIR)
    if job_dir:
        from vdk.plugin.ml_training.runtime import job_dir_protection

        job_dir_protection.install(job_dir, os.getcwd(), run_dir)


def route_output(rank: int, run_dir: str) -> None:
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


def reset_signals() -> None:
    """A rank forked from torchrun's agent inherits its handlers; a script expects Python's defaults."""
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def die_with_parent() -> None:
    """If torchrun's agent dies, even by SIGKILL, this rank follows (Linux; elsewhere the launcher
    kills ranks it knows)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def dump_stacks_on_crash(path) -> None:
    """Python stacks of every thread into rank-<N>.stack on a fatal signal or on SIGTERM (a timeout):
    where a hung or crashed rank was."""
    import faulthandler

    from vdk.plugin.ml_training.runtime import protocol

    global _stack_file
    f = _stack_file = open(path, "a", encoding="utf-8")  # no `with`: faulthandler writes to it until the end
    f.write(protocol.stack_file_header())  # which thread is this rank's own, for whoever reads the dump
    f.flush()
    faulthandler.enable(file=f, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=f, all_threads=True, chain=True)


def dump_stacks_now() -> None:
    """Where every thread is, as faulthandler writes it on SIGTERM: for a Python handler of SIGTERM that replaced
    faulthandler's (runtime/resume.py), so that a stopped rank's stack file says where it was all the same."""
    if _stack_file is None:
        return
    import faulthandler

    try:
        faulthandler.dump_traceback(file=_stack_file, all_threads=True)
    except (OSError, ValueError):
        pass


def dump_stacks_again_on(signum: int) -> None:
    """A Python handler of `signum` (runtime/resume.py's SIGTERM) replaced faulthandler's: back to the stack dump."""
    if _stack_file is None:
        return
    import faulthandler

    faulthandler.register(signum, file=_stack_file, all_threads=True, chain=True)


def start_progress():
    """Progress lines of this process (rank 0), or None when they are off."""
    from vdk.plugin.ml_training.runtime import progress_lines

    try:
        return progress_lines.start()
    except Exception as e:  # noqa: BLE001 - no progress lines, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"no progress lines ({type(e).__name__}: {e})") + "\n")
        return None


def report_to_kubeflow(reporter, sampler=None):
    """Every rank of a TrainJob whose Kubeflow Trainer asks for its status: this plugin is its one writer
    (transformers' own callback turned off); rank 0, whose `reporter` prints progress lines, posts them with
    its node's GPU figures (runtime/kubeflow_status.py). The poster, or None."""
    from vdk.plugin.ml_training.runtime import kubeflow_status

    try:
        return kubeflow_status.start(reporter, sampler)
    except Exception as e:  # noqa: BLE001 - no Kubeflow status, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"no Kubeflow status ({type(e).__name__}: {e})") + "\n")
        return None


def start_metric():
    """The metric watch of rank 0 of a sweep's trial (runtime/metrics.py), or None (no sweep, or an error)."""
    from vdk.plugin.ml_training.runtime import metrics

    try:
        return metrics.start()
    except Exception as e:  # noqa: BLE001 - no metric, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"the sweep's metric is not followed ({type(e).__name__}: {e})") + "\n")
        return None


def follow_shown(*receivers) -> None:
    """What the script shows (its trainers' logs, its printed lines) goes to `receivers` from now on: a sweep trial's
    metric watch, the run's series (None among them: left out)."""
    from vdk.plugin.ml_training.runtime import metrics

    try:
        metrics.follow_shown(*receivers)
    except Exception as e:  # noqa: BLE001 - no values followed, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"the values the script shows are not followed ({type(e).__name__}: {e})") + "\n")


def start_series(gpus=None):
    """Rank 0's series for TensorBoard and MLflow (runtime/series.py), `gpus()` its node's GPU figures now; None
    when there are none to write."""
    from vdk.plugin.ml_training.runtime import board_events
    from vdk.plugin.ml_training.runtime import mlflow_runs
    from vdk.plugin.ml_training.runtime import series

    try:
        if not series.SeriesSettings.from_env().period:
            return None
        facts = series.read_facts()
        writers: list[series.Writer] = [w for w in (board_events.start(facts), mlflow_runs.start(facts)) if w]
        return series.start(writers, gpus)
    except Exception as e:  # noqa: BLE001 - no series, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"no TensorBoard or MLflow series ({type(e).__name__}: {e})") + "\n")
        return None


def finish_series(recorder, error: BaseException | None = None, status: str | None = None) -> None:
    """The script ended: the series' last points written, each writer closed (bounded)."""
    if recorder is not None:
        try:
            recorder.finish(status or ending(error))
        except Exception:  # noqa: BLE001 - the run's outcome is already known
            pass


def gpu_figures(samplers: list):
    """`gpus()` of a series whose node's GPU sampler is in `samplers` once it is started."""
    return lambda: samplers[0].current() if samplers and samplers[0] is not None else None


def start_watchdog(counters: list, on_stall=None):
    """This rank's stall watchdog over the step counter that `counters` will hold, or None when it is off."""
    from vdk.plugin.ml_training.runtime import watchdog

    try:
        return watchdog.start(str(global_rank()), lambda: counters[0].steps if counters else 0, on_stall)
    except Exception as e:  # noqa: BLE001 - no watchdog, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"no stall watchdog ({type(e).__name__}: {e})") + "\n")
        return None


def start_gpu_sampler(counters: list, on_idle=None):
    """This node's GPU sampler (runtime/gpu_sampler.py) over the step counter that `counters` will hold, when
    this process is the node's local rank 0 and NVML finds GPUs; else None, silently."""
    from vdk.plugin.ml_training.runtime import gpu_sampler

    try:
        return gpu_sampler.start(lambda: counters[0].steps if counters else 0, on_idle)
    except Exception as e:  # noqa: BLE001 - no GPU figures, but the user's code runs as ever
        sys.stderr.write(wire.warning(f"no GPU sampling ({type(e).__name__}: {e})") + "\n")
        return None


def finish_gpu_sampler(sampler) -> None:
    """The script ended: the node's GPU totals, printed and left in the termination message."""
    if sampler is not None:
        try:
            sampler.finish()
        except Exception:  # noqa: BLE001 - the run's outcome is already known
            pass


def stop_watchdog(watch) -> None:
    """The script ended: what it does from here on (teardown) is not training."""
    if watch is not None:
        watch.stop()


def count_steps_once_torch_is_imported(*then) -> None:
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
            sys.stderr.write(wire.warning(f"optimizer steps are not counted ({type(e).__name__}: {e})") + "\n")

    post_import.when_imported("torch", install)


def ending(error: BaseException | None) -> str:
    """How the script ended, as a protocol status: `sys.exit(0)` is an ordinary end."""
    from vdk.plugin.ml_training.runtime import protocol

    if error is None or (isinstance(error, SystemExit) and error.code in (None, 0)):
        return protocol.FINISHED
    return protocol.FAILED


def end_process_group() -> None:
    """Destroy the script's process group, if it left one (only when torch is imported already)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the run's outcome is already known; cleanup must not change it
        pass


def end_rpc() -> None:
    """A smoke rank stopped at the agreed end with RPC still up (the script's `rpc.shutdown()` is after the code it
    was stopped in): shut RPC down as the script would have, gracefully, so that its peers' `rpc.shutdown()` returns
    (an observer, a parameter server that never steps, waits there for every worker) instead of waiting until
    smoke_timeout; a peer still training stops at its next step (smoke_stop.py) and joins then."""
    if "torch.distributed.rpc" not in sys.modules:
        return
    try:
        from torch.distributed import rpc

        if rpc.is_available() and rpc.api._is_current_rpc_agent_set():
            rpc.shutdown(graceful=True)
    except Exception:  # noqa: BLE001 - the run's outcome is already known; a peer that died leaves nothing to wait for
        pass


def exit_status(error: BaseException | None) -> int | None:
    """The exit status `python script.py` ends with after a script that ended with `error` (None: it returned):
    0, n after sys.exit(n), 1 after sys.exit("message"); None after an exception, which the interpreter reports."""
    if error is None:
        return 0
    if not isinstance(error, SystemExit):
        return None
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code & 0xFF  # as the system keeps it
    return 1


def say_exit_message(error: BaseException | None) -> None:
    """What python prints for sys.exit("message") (on stderr), where the interpreter no longer handles the end."""
    if isinstance(error, SystemExit) and error.code is not None and not isinstance(error.code, int):
        try:
            sys.stderr.write(f"{error.code}\n")
        except (OSError, ValueError):
            pass


def end(code: int) -> NoReturn:
    """End the process of a script that ended (returned, or called sys.exit) with `code`: as `python script.py`
    does up to its teardown (finish_script), then at once, so that no crash in a library's teardown can change
    how it ended."""
    finish_script()
    os._exit(code)


def finish_script() -> None:
    """What the interpreter does once a script has ended, before its teardown, and in its order: the script's
    non-daemon threads waited for (and concurrent.futures' workers), its `atexit` handlers run (logging's, which
    flushes and closes every handler, among them), then what it wrote flushed (flush_outputs). Once per process."""
    global _script_ended
    if _script_ended:
        return
    _script_ended = True
    _wait_for_threads()
    import atexit

    atexit._run_exitfuncs()  # prints what a handler raises and goes on, as at exit
    import gc

    gc.collect()  # what nothing refers to any more is finalized, as a teardown would: files closed, loaders stopped
    flush_outputs()


def _wait_for_threads() -> None:
    import threading

    if threading.current_thread() is threading.main_thread():
        shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls at exit
        if shutdown is not None:
            shutdown()
            return
    for thread in threading.enumerate():
        if not thread.daemon and thread is not threading.current_thread() and thread is not threading.main_thread():
            thread.join()


def flush_outputs() -> None:
    """What a teardown would still write: the files the script left open in buffered handles are closed, as their
    finalizers would close them (a text layer first: it writes into the buffer beneath), the standard streams and
    C's stdio buffers (a library's printf) flushed. The standard streams and the stack file stay open."""
    import gc
    import io

    _flush_standard_streams()
    kept = {id(f) for f in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    kept.add(id(_stack_file))
    opened = [o for o in gc.get_objects() if issubclass(type(o), io.IOBase) and id(o) not in kept]
    for f in sorted(opened, key=lambda f: not issubclass(type(f), io.TextIOBase)):
        try:
            if not f.closed and f.writable():
                f.close()
        except Exception:  # noqa: BLE001 - a file that cannot be written to any more has nothing to keep
            pass
    _flush_standard_streams()


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - closed by the script, or not a stream
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)  # every C stdio stream: what a library printed, buffered in a pipe
    except (OSError, AttributeError):
        pass


def end_now(code: int) -> NoReturn:
    """End the process now, whatever its script still does (a smoke rank stopped at its step limit, or failed: its
    threads and exit handlers would wait for training that is over): its DataLoader workers and other children
    stopped, what it wrote flushed, no teardown."""
    import gc
    import multiprocessing

    gc.collect()  # a stopped DataLoader iterator shuts its workers down when collected
    for child in multiprocessing.active_children():
        child.terminate()
    flush_outputs()
    os._exit(code)
