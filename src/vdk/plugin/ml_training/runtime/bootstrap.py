"""The program every training process runs: `python -m vdk.plugin.ml_training.runtime.bootstrap
ENTRYPOINT [ARGS...]`, where ENTRYPOINT is `script.py` or `-m package.module`, under torchrun.

In a job image it runs the user's code exactly as `python script.py` / `python -m module` would, and
rank 0 prints progress lines (runtime/progress_lines.py), and posts them to Kubeflow Trainer when it asks
for a TrainJob's status (runtime/kubeflow_status.py); every rank runs the stall watchdog
(runtime/watchdog.py); each node's local rank 0 samples its GPUs (runtime/gpu_sampler.py). Under the
local launcher (VDK_ML_TRAINING_MODE set) it also keeps the output of
ranks other than 0 in log files, reports how the rank ended in a result file (the launcher shows the
failing rank's traceback once), keeps its writes out of the job directory (job_dir_protection.py), and in smoke
mode installs the CPU stand-ins and the smoke run's end (the first optimizer step of the second epoch,
epochs.py) instead of progress lines and the watchdog (a smoke run has its own timeout).

In every mode, a rank whose script returned (or called sys.exit) ends as `python script.py` would up to its
teardown, with the script's exit code, and skips the teardown (rank_process.end): a library that crashes there
cannot fail a rank that finished. A crash before the script returned is reported as under python.

What a training process does as it starts and ends is in rank_process.py, shared with the workers a
script spawns; a smoke rank's stand-ins and end are in smoke_rank.py. This module runs as `__main__`
(`python -m`, or torchrun's `--run-path`), so it keeps no state that another module would look up.
"""

from __future__ import annotations

import os
import runpy
import sys
import types

from vdk.plugin.ml_training.runtime import rank_process
from vdk.plugin.ml_training.vocabulary import wire

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
        return _run_in_image(entry)
    return _run_locally(entry, mode, run_dir)


def _run_in_image(entry: list[str]) -> int:
    """The user's code and nothing else, but for the progress lines of rank 0, every rank's stall
    watchdog (and workers spawned by a launcher process forming their own process group:
    spawned_workers.py), and what the job's environment asks for: the CPU adaptations, parameter
    checksums. An exception the script raised goes on to the interpreter, which prints it as under python."""
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime import spawned_workers

    rank = rank_process.global_rank()
    outputs = _enter_output_dir()
    if outputs is not None and rank == 0:
        _count_start()
    _install_resume()
    spawned_workers.install(reports_progress=rank == 0)
    adaptations = _adapt_to_cpu() if protocol.switched_on(protocol.ADAPT_TO_CPU) else None
    reporter = rank_process.start_progress() if rank == 0 else None
    metric = rank_process.start_metric() if rank == 0 else None  # a sweep's trial (runtime/metrics.py)
    checksum = _checksum()
    counters: list = []  # the StepCounter, once the code imported torch
    watch = rank_process.start_watchdog(counters)
    sampler = rank_process.start_gpu_sampler(counters)
    rank_process.report_to_kubeflow(reporter, sampler)  # a TrainJob's status, when its Trainer asks for it
    series = rank_process.start_series(rank_process.gpu_figures([sampler])) if rank == 0 else None
    rank_process.follow_shown(metric, series)
    if any(x is not None for x in (reporter, watch, sampler, checksum, outputs, metric, series)):
        receivers = [x.attach for x in (reporter, checksum, metric, series) if x is not None]
        rank_process.count_steps_once_torch_is_imported(counters.append, *receivers)

    def wrap_up(error: BaseException | None) -> None:  # the last line says how far it got
        rank_process.stop_watchdog(watch)
        if metric is not None:
            metric.finish()
        if reporter is not None:
            reporter.finish(rank_process.ending(error))
        rank_process.finish_series(series, error)
        rank_process.finish_gpu_sampler(sampler)
        if rank_process.ending(error) == protocol.FINISHED:
            _end_lines(rank, checksum, adaptations)
        _report_outputs(rank, outputs)

    try:
        run_entrypoint(entry)
    except SystemExit as e:
        ended: SystemExit | None = e
    except BaseException as e:  # a crash before the script returned: the interpreter reports it
        wrap_up(e)
        raise
    else:
        ended = None
    wrap_up(ended)
    rank_process.say_exit_message(ended)
    return _end(rank_process.exit_status(ended) or 0)


def _enter_output_dir() -> str | None:
    """The run's output directory as the working directory, the job's code linked into it (output_workdir.py).
    A run whose outputs would be lost stops here, saying why."""
    from vdk.plugin.ml_training.runtime import output_workdir

    try:
        return output_workdir.enter_output_dir()
    except OSError as e:
        _write_line(
            wire.error(
                f"cannot work in the output directory {output_workdir.output_dir()}: {e}. "
                "Check that the output claim (output_pvc) is writable by the pod's user, and not full"
            )
        )
        raise SystemExit(1) from None


def _count_start() -> None:
    """One more start of the run in its output directory; past MAX_STARTS (1 + max_restarts + max_disruptions) it
    stops here, saying why: a run preempted again and again would otherwise restart for ever (a disruption's restart
    is not counted by the cluster)."""
    from vdk.plugin.ml_training.runtime import protocol
    from vdk.plugin.ml_training.runtime.lineage import Lineage

    lineage = Lineage.of_this_process()
    most = os.environ.get(protocol.MAX_STARTS, "")
    if lineage is None or not most.isdigit():
        return
    starts = lineage.started()
    if starts > int(most):
        _write_line(
            wire.error(
                f"this run started {starts} times in {lineage.directory} (at most {most}: 1 + max_restarts + "
                "max_disruptions), so it stops restarting. Check `vdk show` for why its pods keep being stopped "
                "(preempted, evicted, a node lost); raise max_disruptions, or start it again with vdk execute --start"
            )
        )
        raise SystemExit(1)


def _install_resume() -> None:
    """Automatic resume and the checkpoint on the way out, when the run's `resume` is auto (runtime/resume.py)."""
    from vdk.plugin.ml_training.runtime import post_import
    from vdk.plugin.ml_training.runtime import resume

    try:
        if not resume.install():
            return
        from vdk.plugin.ml_training.runtime import accelerate_resume
        from vdk.plugin.ml_training.runtime import hf_resume
        from vdk.plugin.ml_training.runtime import lightning_resume

        post_import.when_imported("transformers.trainer", hf_resume.patch)
        for name in lightning_resume.TRAINER_MODULES:
            post_import.when_imported(name, lightning_resume.patch)
        post_import.when_imported("accelerate.accelerator", accelerate_resume.patch)
    except Exception as e:  # noqa: BLE001 - no automatic resume, but the user's code runs as ever
        _write_line(wire.warning(f"no automatic resume ({type(e).__name__}: {e})"))


def _report_outputs(rank: int, outputs: str | None) -> None:
    if outputs is not None and rank == 0:
        from vdk.plugin.ml_training.runtime import output_workdir

        output_workdir.report(outputs)


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
        _write_line(wire.line(wire.ADAPTED, ", ".join(adaptations.counts)))


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

    rank = rank_process.global_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # a script that spawns its own workers runs as one launcher process; its workers are the ranks
    name = protocol.LAUNCHER if os.environ.get(protocol.SPAWNED_WORKERS) else rank
    _enter_output_dir()  # in the job's image (vdk run --container), as on a cluster; here it is the directory already
    rank_process.guard_writes(run_dir)
    report_argument_errors()
    rank_process.route_output(rank, run_dir)
    rank_process.reset_signals()
    rank_process.die_with_parent()
    rank_process.dump_stacks_on_crash(protocol.stack_path(run_dir, name))
    # smoke runs count steps from the start: a rank that never steps has taken 0, not an unknown number
    report = RankReport(run_dir, name, local_rank, **({"steps": 0} if mode == protocol.SMOKE else {}))

    adaptations = reporter = watch = sampler = None
    metric = rank_process.start_metric() if rank == 0 else None  # a sweep's trial (runtime/metrics.py)
    samplers: list = []  # the node's GPU sampler, once started: the series read its figures
    series = None
    if rank == 0 and mode == protocol.FULL:  # TensorBoard's event files, an MLflow run (runtime/series.py)
        series = rank_process.start_series(rank_process.gpu_figures(samplers))
    rank_process.follow_shown(metric, series)
    checksum = _checksum()
    counters: list = []  # the StepCounter, once there is one
    stopped_at_limit: tuple = ()  # the smoke run's SmokeStepsReached; full runs import no torch here
    _install_resume()
    if mode == protocol.SMOKE:
        from vdk.plugin.ml_training.runtime import smoke_rank
        from vdk.plugin.ml_training.runtime import smoke_resume
        from vdk.plugin.ml_training.runtime.resume import StoppedToResume
        from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

        os.environ[protocol.CODE_DIRS] = _code_dir(entry)
        adaptations = smoke_rank.install_stand_ins(run_dir)
        counter = smoke_rank.step_counter(name)
        smoke_resume.install(name)  # the resume check's first or second start (ops/resume_check.py)
        counter.listeners.insert(0, StepRecorder(report))  # a handful of steps: each one recorded
        if checksum is not None:
            counter.listeners.insert(0, checksum.on_step)  # before the step limit ends the script
        if metric is not None:
            metric.attach(counter)
        counters.append(counter)
        stopped_at_limit = (SmokeStepsReached, StoppedToResume)  # the first start's planned end: a stop
    else:  # full: every rank counts its steps for the summary and runs the watchdog; rank 0 prints progress lines
        from vdk.plugin.ml_training.runtime import spawned_workers

        spawned_workers.install(reports_progress=False)
        reporter = rank_process.start_progress() if rank == 0 else None
        if protocol.switched_on(protocol.ADAPT_TO_CPU):
            adaptations = _adapt_to_cpu()

        def record_steps(counter) -> None:
            counter.listeners.append(StepRecorder(report, period=FULL_RUN_RECORD_SECONDS))

        def record_stall(stall) -> None:  # the device is not asked for the loss: it may hang too
            report.finish(protocol.STALLED, stall=stall.to_dict(), steps=counters[0].steps if counters else 0)

        def record_idle(idle) -> None:
            from vdk.plugin.ml_training.runtime import idle_policy

            error = {"type": idle_policy.ERROR_TYPE, "message": idle.describe(), "traceback": ""}
            report.finish(protocol.FAILED, error=error, idle=idle.to_dict(), steps=idle.last_step or 0)

        receivers = [x.attach for x in (reporter, checksum, metric, series) if x is not None]
        rank_process.count_steps_once_torch_is_imported(counters.append, record_steps, *receivers)
        watch = rank_process.start_watchdog(counters, record_stall)
        sampler = rank_process.start_gpu_sampler(counters, record_idle)
        samplers.append(sampler)

    raised: BaseException | None
    status, error, code, raised = protocol.FINISHED, None, 0, None
    try:
        run_entrypoint(entry)
    except stopped_at_limit:
        status = protocol.STOPPED
    except SystemExit as e:
        if e.code not in (None, 0):
            status, code, raised = protocol.FAILED, rank_process.exit_status(e) or 1, e
            error = describe_exit(e)
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt too: reported, not printed
        status, code, raised = protocol.FAILED, 1, e
        error = describe(e)
    if mode == protocol.SMOKE:  # the end the ranks agree on: the first that stops, stops them all
        from vdk.plugin.ml_training.runtime import smoke_rank

        if smoke_rank.agreed_end(name, status, raised, counters[0].steps if counters else 0):
            status, code, error = protocol.STOPPED, 0, None
    rank_process.stop_watchdog(watch)
    if metric is not None:
        metric.finish()
    if status != protocol.FAILED and checksum is not None:
        _end_lines(rank, checksum, None)
    fields: dict = {"error": error}
    if counters:
        counters[0].settle()  # a manual update after the last backward pass
        fields.update(steps=counters[0].steps, last_loss=json_number(counters[0].loss()))
    if mode == protocol.SMOKE:
        from vdk.plugin.ml_training.runtime import smoke_rank

        fields["epoch_end"] = smoke_rank.epoch_end(status).to_record()
        fields["training_end"] = smoke_rank.training_end(status).to_record()
    if reporter is not None:
        reporter.finish(status)
        fields["progress"] = reporter.last_line
    rank_process.finish_series(series, status=status)
    if sampler is not None:
        rank_process.finish_gpu_sampler(sampler)
        fields["gpu"] = sampler.last_line
    if adaptations is not None:
        fields["adaptations"] = dict(adaptations.counts)
        fields["observed"] = sorted(adaptations.observed)
        if adaptations.spawned:
            fields["spawned"] = list(adaptations.spawned)
        fields["turned_off"] = dict(adaptations.turned_off)
    if status == protocol.FINISHED:  # a stopped rank's peers may still be in a collective with it: it just ends
        rank_process.end_process_group()
    elif status == protocol.STOPPED:  # but its RPC peers wait in rpc.shutdown() for it: it joins them
        rank_process.end_rpc()
    report.finish(status, **fields)
    if mode == protocol.SMOKE and status != protocol.FINISHED:  # cut short: stopped at its end, or failed
        return _end_now(code)
    return _end(code)


def _code_dir(entry: list[str]) -> str:
    """The directory of the entrypoint's script (of a module run with -m: the working directory)."""
    if entry and entry[0] != "-m":
        return os.path.dirname(os.path.realpath(entry[0]))
    return os.getcwd()


def _end(code: int) -> int:
    """This rank's end once its script ended (returned, or called sys.exit): as `python script.py` up to its
    teardown, then none (rank_process.end). A rank forked from torchrun's agent (a smoke run's) does the same
    but returns `code`: multiprocessing hands its result to the agent, then ends it without a teardown."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        rank_process.end(code)
    rank_process.finish_script()
    return code


def _end_now(code: int) -> int:
    """End a smoke rank whose script was cut short (stopped at its step limit, or failed) now, without its
    threads and exit handlers, which may wait for training that is over (rank_process.end_now). A rank forked
    from torchrun's agent returns instead: multiprocessing reports its result to the agent and then ends it the
    same way."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        rank_process.end_now(code)
    rank_process.flush_outputs()
    return code


if __name__ == "__main__":
    sys.exit(main())
