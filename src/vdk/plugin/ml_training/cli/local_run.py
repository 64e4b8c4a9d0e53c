"""`vdk run JOB` for ml-training jobs: the smoke run (default) or a full local run, its summary,
and the VDK execution result. The `--full` flag is added to vdk-core's own `run` command."""

from __future__ import annotations

import contextvars
import functools
import importlib.util
import logging
import re
import shlex
import shutil
import signal
import sys
from datetime import datetime
from datetime import timezone
from pathlib import Path
from typing import Any

import click

from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli.imports import SKIP_OPTION
from vdk.plugin.ml_training.cli.imports import check_job_imports
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.settings import CONTAINER_MODE
from vdk.plugin.ml_training.job.settings import RUN_MODE
from vdk.plugin.ml_training.job.settings import RUN_MODES
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.job.settings import setting
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.launcher import Starter
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.memory import machine_memory_bytes
from vdk.plugin.ml_training.local.outcome import LAUNCHER_RANK
from vdk.plugin.ml_training.local.outcome import MISSING
from vdk.plugin.ml_training.local.outcome import RankOutcome
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.local.outcome import one_line
from vdk.plugin.ml_training.local.stack_dump import user_stack
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE
from vdk.plugin.ml_training.source.import_check import REQUIREMENTS
from vdk.plugin.ml_training.source.import_check import Requirements
from vdk.plugin.ml_training.source.import_check import distribution_for
from vdk.plugin.ml_training.source.job_files import Excluded
from vdk.plugin.ml_training.units import format_duration

log = logging.getLogger(__name__)

# `vdk run --full` / `--container` / `--skip-import-check` for this invocation; the click group outlives
# invocations, so the flags are set per call by the wrapped callback, never left behind.
_full_requested: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_full", default=False)
_container_requested: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_container", default=False)
_skip_import_check: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_skip_imports", default=False)


class LocalRunFailed(MLTrainingError):
    """A local run of an ml-training job did not pass; the summary above it says why."""


def add_run_flags(root_command: click.Group) -> None:
    """Give vdk-core's `run` command the flags of ml-training jobs; applying it twice changes nothing."""
    run = root_command.commands.get("run")
    if run is None:
        return
    _add_flag(
        run,
        "--full",
        _full_requested,
        "ml-training jobs: train to completion with torchrun on this machine's GPUs (no CPU stand-ins, no step "
        "limit) instead of the smoke run. Same as VDK_ML_TRAINING_RUN_MODE=full.",
    )
    _add_flag(
        run,
        "--container",
        _container_requested,
        "ml-training jobs: run inside the job's image, the one `vdk deploy` pushes, with podman or docker (the "
        "smoke run, or with --full the whole run). Same as VDK_ML_TRAINING_RUN_MODE=container.",
    )
    _add_flag(
        run,
        SKIP_OPTION,
        _skip_import_check,
        "ml-training jobs: do not check first that the job's image has every module the job imports "
        "(for a false alarm; `import_check = false` in [ml-training] does the same).",
    )


def _add_flag(run: click.Command, flag: str, variable: contextvars.ContextVar[bool], help: str) -> None:
    name = flag.lstrip("-").replace("-", "_")
    if any(p.name == name for p in run.params):
        return
    run.params.append(click.Option([flag], is_flag=True, default=False, help=help))
    original = run.callback

    @functools.wraps(original)  # type: ignore[arg-type]
    def callback(*args: Any, **kwargs: Any) -> Any:
        token = variable.set(bool(kwargs.pop(name, False)))
        try:
            return original(*args, **kwargs)  # type: ignore[misc]
        finally:
            variable.reset(token)

    run.callback = callback


def run_mode(configuration: Any, job_dir: Path | None = None) -> tuple[str, bool]:
    """(smoke or full, whether in the job's image) from the flags, else ml_training_run_mode (the environment,
    else [vdk] of the job's config.ini)."""
    mode = str(setting(configuration, RUN_MODE, job_dir)[0] or protocol.SMOKE).strip().lower()
    if mode not in RUN_MODES:
        raise MLTrainingError(
            f"VDK_ML_TRAINING_RUN_MODE (ml_training_run_mode) is {mode!r}, which is not one of {', '.join(RUN_MODES)}",
            "set it to `smoke` (a few steps on CPU, the default), `full` or `container` (the smoke run in the job's "
            "image), or pass `vdk run --full` / `--container`",
        )
    in_container = _container_requested.get() or mode == CONTAINER_MODE
    full = _full_requested.get() or mode == protocol.FULL
    return (protocol.FULL if full else protocol.SMOKE), in_container


def run_ml_job(context: Any) -> Any:
    """The `run_job` hook's work for an ml-training job: returns VDK's ExecutionResult."""
    started = _utc_now()
    step_name = "config.ini"
    with interrupts.stop_on_signals():
        try:
            configuration = context.core_context.configuration
            spec = load_job_spec(context.job_directory, job_settings(configuration, context.job_directory))
            step_name = str(spec.entrypoint)
            mode, in_container = run_mode(configuration, context.job_directory)
            if not _skip_import_check.get():
                check_imports_locally(spec)
            if in_container:
                error = run_in_container(spec, mode, configuration, context.job_directory)
            else:
                error = run_locally(smoke_plan(spec) if mode == protocol.SMOKE else full_plan(spec))
        except MLTrainingError as e:
            error = e
        except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: what was started is stopped already
            interrupts.exit_interrupted(e)
    return _execution_result(context, step_name, started, error)


def check_imports_locally(spec: MLJobSpec, err: bool = False) -> None:
    """The import check with what is known of the base image without contacting its registry."""
    from vdk.plugin.ml_training.image.base_facts_cache import known_provides

    check_job_imports(spec, known_provides(spec), err=err)


def run_in_container(
    spec: MLJobSpec, mode: str, configuration: Any, job_dir: Path | None = None
) -> LocalRunFailed | None:
    """The run of `mode` inside the job's image (cli/container_run.py)."""
    from vdk.plugin.ml_training.cli import container_run

    plan, starter = container_run.prepare(spec, mode, container_run.engine_from(configuration, job_dir))
    return run_locally(plan, starter=starter)


def run_locally(
    plan: LaunchPlan, err: bool = False, starter: Starter | None = None, again: str | None = None
) -> LocalRunFailed | None:
    """Run the plan, print its summary, and return the error to report, if it did not pass.

    `err`: everything goes to stderr (the smoke check before a deploy, whose stdout is its result).
    `starter`: where torchrun runs (default: this machine). `again`: what the fix ends with, after the change
    it asks for (default: run `vdk run JOB` again)."""
    # `vdk -v DEBUG` sets the root logger's level; VDK_LOG_LEVEL_VDK=DEBUG that of "vdk.*" loggers
    debug = log.isEnabledFor(logging.DEBUG) or logging.getLogger().isEnabledFor(logging.DEBUG)
    starter = starter or HostStarter()
    starter.check()  # before the start line: nothing starts without torch
    click.echo(format_start(plan), err=err)
    try:
        run = launch(plan, stdout=sys.stderr if err else None, starter=starter)
    except KeyboardInterrupt as e:
        signal_name = interrupts.as_interrupted(e).name
        click.echo(f"\n{plan.mode} run interrupted by {signal_name}: every process of it was stopped.", err=True)
        raise
    outcome = analyse(run)
    if debug:
        click.echo(format_agent_log(run.agent_log), err=err)
    click.echo(format_summary(outcome), err=err)
    if outcome.passed and plan.mode == protocol.SMOKE and not debug:
        shutil.rmtree(run.run_dir, ignore_errors=True)  # a full run's logs stay: it may have run for hours
    elif outcome.passed and debug:
        click.echo(f"  run files: {run.run_dir}", err=err)
    if outcome.passed:
        return None
    return LocalRunFailed(
        f"{plan.mode} run of {plan.spec.name} failed: {outcome.headline}", failure_fix(outcome, again)
    )


def _utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # naive UTC, as vdk-core's results hold


def _execution_result(context: Any, step_name: str, started: datetime, error: BaseException | None) -> Any:
    from vdk.internal.builtin_plugins.run.execution_results import ExecutionResult
    from vdk.internal.builtin_plugins.run.execution_results import StepResult
    from vdk.internal.builtin_plugins.run.run_status import ExecutionStatus
    from vdk.internal.core.errors import ResolvableBy
    from vdk.internal.core.statestore import CommonStoreKeys

    ended = _utc_now()
    status = ExecutionStatus.ERROR if error else ExecutionStatus.SUCCESS
    blamee = ResolvableBy.USER_ERROR if error else None
    step = StepResult(step_name, "ml-training", started, ended, status, None, error, blamee)
    # The error stays on the step only: vdk-core then prints its one line instead of a traceback
    # of its own frames around the user's.
    return ExecutionResult(
        context.name,
        context.core_context.state.get(CommonStoreKeys.EXECUTION_ID),
        started,
        ended,
        status,
        [step],
        None,
        blamee,
    )


# --- what the user reads ----------------------------------------------------------------------


def format_start(plan: LaunchPlan) -> str:
    spec = plan.spec
    limit = f", timeout {format_duration(plan.timeout_seconds)}" if plan.timeout_seconds else ""
    if plan.mode == protocol.SMOKE:
        steps = f"{spec.smoke_steps} optimizer step{'s' if spec.smoke_steps != 1 else ''}"
        virtual = int(plan.env.get(protocol.SMOKE_GPUS) or 0)
        gpus = _count(virtual, "virtual GPU") if virtual else "no GPU"
        processes = (
            f"1 launcher process spawning {_count(plan.workers, 'worker')} on {gpus}"
            if plan.workers
            else f"{_count(plan.processes, 'process')} on {gpus}"
        )
        text = (
            f"ml-training smoke run of {spec.name}: {spec.entrypoint} on CPU, {processes}, "
            f"{steps}{' each' if plan.ranks > 1 else ''}{limit}"
        )
    else:
        text = f"ml-training full run of {spec.name}: {spec.entrypoint}, {_count(plan.processes, 'process')}{limit}"
    return "\n".join([text, *(f"  note: {n}" for n in plan.notes)])


def format_summary(outcome: RunOutcome) -> str:
    run = outcome.run
    mode = run.plan.mode
    lines = [""]
    if outcome.passed:
        lines.append(f"{mode} run PASSED in {run.wall_seconds:.1f} s ({_count(len(outcome.ranks), 'process')})")
        lines += [f"  {_rank_line(r, mode)}" for r in outcome.ranks]
        adapted = outcome.adaptations()
        if outcome.launcher is not None:
            lines.append(f"  {_rank_line(outcome.launcher, mode)}")
        lines += _epoch_lines(outcome)
        if adapted:
            lines.append(f"  adapted for CPU: {', '.join(adapted)}")
        lines += [f"  warning: {w}" for w in outcome.warnings]
        if mode == protocol.FULL:
            lines += _progress_lines(outcome)
            lines += _log_lines(outcome)
            lines += _work_dir_lines(outcome)
        return "\n".join(lines)

    lines.append(f"{mode} run FAILED after {run.wall_seconds:.1f} s: {outcome.headline}")
    root = outcome.root_cause
    if root is not None and root.error:
        lines += ["", root.error.get("traceback", "").rstrip()]
        limit = gloo_limit(root.error)
        if limit:
            lines += ["", f"note: {limit}"]
    elif root is not None and root.stall is not None:
        lines += _stall_details(root, outcome)
    elif root is not None:
        lines += _death_details(root, run.plan.spec.job_dir)
    elif all(r.status == MISSING for r in outcome.ranks) and not run.timed_out:
        tail = _tail(run.agent_log, 20)
        lines += ["", f"last lines of torchrun's log ({run.agent_log}):", *(f"  {t}" for t in tail)]
    if run.timed_out:
        for rank in outcome.ranks:
            if not rank.succeeded:
                lines += _where(rank, run.plan.spec.job_dir)
    lines.append("")
    for other in outcome.consequences:
        what = one_line(other.error, width=120) if other.error else other.death()
        lines.append(f"  then {other.label}: {what}")
    lines += [f"  {_rank_line(r, mode)}" for r in outcome.ranks]
    if outcome.launcher is not None:
        lines.append(f"  {_rank_line(outcome.launcher, mode)}")
    lines += _epoch_lines(outcome, failed=True)
    lines += _progress_lines(outcome)
    lines += _log_lines(outcome)
    if mode == protocol.FULL:
        lines += _work_dir_lines(outcome)
    lines.append(f"  torchrun's log: {run.agent_log}")
    return "\n".join(lines)


def _epoch_lines(outcome: RunOutcome, failed: bool = False) -> list[str]:
    """Smoke runs: whether the end of an epoch ran, and what ran after it (a failure: only if it was reached)."""
    end = outcome.epoch_end if outcome.run.plan.mode == protocol.SMOKE else None
    if end is None:
        return []
    if end.reached:
        text = "reached" + (f" ({end.how})" if end.how else "")
        if end.then:
            text += f", then {', '.join(end.then)}"
        return [f"  end of epoch: {text}"]
    return [f"  end of epoch: not reached ({end.why_not})"] if end.why_not and not failed else []


def _work_dir_lines(outcome: RunOutcome) -> list[str]:
    work = outcome.run.work
    if work is None:
        return []
    return [f"  working directory: {work.path} (what the run wrote is there; the job directory is unchanged)"]


def _progress_lines(outcome: RunOutcome) -> list[str]:
    """A full run's last progress line, read back as `vdk show` reads a cluster run's."""
    reported = [parse_progress([r.progress]) for r in outcome.ranks if r.progress]
    return [f"  last progress: {p.describe()}" for p in reported if p is not None]


def _log_lines(outcome: RunOutcome) -> list[str]:
    logs = [f"rank {r.rank}: {r.log}" for r in outcome.ranks if r.log]
    return [f"  output of ranks: {', '.join(logs)}"] if logs else []


def failure_fix(outcome: RunOutcome, again: str | None = None) -> str:
    """What to do about a failed run; it ends with `again` (default: run the same `vdk run` again)."""
    run = outcome.run
    root = outcome.root_cause
    full = " --full" if run.plan.mode == protocol.FULL else ""
    container = " --container" if run.engine else ""
    again = again or f"run `vdk run{container}{full} {run.plan.spec.job_dir}` again"
    if root is not None and root.error:
        if run.plan.mode == protocol.FULL and not run.plan.gpus and _needs_gpu(root.error):
            return (
                "this code needs a GPU and this machine has none: a full run uses no CPU stand-ins. Train it "
                "where there are GPUs (`vdk deploy`), or check it here with the smoke run (`vdk run` without --full)"
            )
        if root.error.get("arguments"):
            return _arguments_fix(run.plan, again)
        if root.error.get("type") in _IMPORT_ERRORS:
            if run.engine:
                return _missing_in_image_fix(root.error, run.plan.spec.job_dir, again)
            return _missing_package_fix(root.error, run, again)
        missing_file = _excluded_file_fix(root.error, run, again)
        if missing_file:
            return missing_file
        if root.error.get("virtual_gpu"):
            return _device_error_fix(root, again)
        limit = gloo_limit(root.error)
        if limit:
            return (
                f"{limit}. Deploy with `vdk deploy --skip-smoke` if the rest of the run passed, or keep the call "
                f"out of smoke runs. Then {again}"
            )
        return f"fix the error in the traceback above ({root.label}), then {again}"
    if outcome.untrained:
        return _untrained_fix(outcome, again)
    if root is not None and root.stall is not None:
        return stall_fix(f"see where {root.label} was (above)", again)
    if root is not None and _killed(root):
        return _memory_fix(outcome, again)
    if root is not None:
        where = f"its output in {root.log}" if root.log else "its output above"
        return (
            f"see {where}; a rank killed by SIGKILL was most likely out of memory, a SIGSEGV/SIGABRT is a "
            f"crash in native code. Then {again}"
        )
    if run.timed_out:
        return (
            f"see where each rank was (above). If the job needs longer, raise `{run.plan.timeout_setting}` in "
            f"[ml-training]" + (" or VDK_ML_TRAINING_SMOKE_TIMEOUT" if run.plan.mode == protocol.SMOKE else "")
        )
    if run.engine and _NO_TORCH in _tail_text(run.agent_log):
        return (
            f"the image's Python has no torch: list torch in {run.plan.spec.job_dir / 'requirements.txt'} (it goes "
            "into the image's dependency layer), or set `base_image` in [ml-training] to a base with torch, such as "
            f"pytorch/pytorch. Then {again}"
        )
    return f"see torchrun's log {run.agent_log}, then {again}"


def stall_fix(where: str, again: str) -> str:
    """What to do about a rank that took no optimizer step for stall_timeout."""
    return (
        f"{where}: a data loader or queue that waits forever, a collective that another rank never joins, or a "
        "deadlock. If a step, an evaluation or a checkpoint really takes longer, raise `stall_timeout` "
        f"(`startup_timeout` before the first step) in [ml-training]; 0 turns the watchdog off. Then {again}"
    )


def _device_error_fix(root: RankOutcome, again: str) -> str:
    """The smoke run's virtual GPU raised what CUDA raises: the fix is in the code, or the check is wrong."""
    if "No CUDA GPUs are available" in (root.error or {}).get("message", ""):
        return (
            "the job asks for no GPU (`gpus_per_node = 0` in [ml-training]): its nodes have none, so CUDA code fails "
            "there as it does here. Set `gpus_per_node` to the GPUs a node should have, or let the code use the CPU "
            f"when torch.cuda.is_available() is False. Then {again}"
        )
    return (
        f"a GPU raises this error at the line above ({root.label}): the smoke run keeps track of which tensors "
        "your code put on a GPU. Move the tensor where the others are (`.to(device)`, `device=` when creating it, "
        "`.cpu()` before `.numpy()`), then "
        f"{again}. If the code is right, the check is wrong: set `smoke_device_tracking = false` in [ml-training] "
        "to turn it off (and please report it)"
    )


# gloo's answers to what it does not implement: "Backend gloo does not support reduce_scatter_tensor_coalesced",
# "Cannot use ReduceOp.PREMUL_SUM with Gloo"
_GLOO_MISSING = (
    (re.compile(r"Backend gloo does not support ([A-Za-z_]+)"), "the collective {}"),
    (re.compile(r"Cannot use (ReduceOp\.[A-Z_]+) with Gloo"), "{}"),
)


def gloo_limit(error: dict[str, str] | None) -> str | None:
    """What the smoke run's gloo lacks that NCCL has, said as a limit of the CPU check (None: not that)."""
    message = (error or {}).get("message", "")
    for pattern, what in _GLOO_MISSING:
        match = pattern.search(message)
        if match:
            return (
                f"{what.format(match.group(1))} is not available in gloo, the CPU backend that stands in for NCCL in "
                "the smoke run: this is a limit of the CPU check, not a bug in your code"
            )
    return None


_IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError")
_NO_TORCH = "No module named 'torch'"
_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _missing_package_fix(error: dict[str, str], run: LocalRun, again: str) -> str:
    """The job's dependencies: installed here for `vdk run`, listed in requirements.txt for the image; or the
    job's own module, which the image (and so the run) leaves out."""
    job_dir = run.plan.spec.job_dir
    requirements = job_dir / REQUIREMENTS
    image = f"list it in {requirements}: `vdk deploy` installs that file into the image's dependency layer"
    missing = _NO_MODULE.search(error.get("message", ""))
    if not missing:
        return (
            "the installed version of a package lacks what the code imports: install the version the code needs "
            f"where vdk runs (`{sys.executable} -m pip install '<package>==<version>'`) and {image}, pinned. "
            f"Then {again}"
        )
    top = missing.group(1).split(".")[0]
    excluded = _excluded_module(run, top)
    if excluded is not None:
        return (
            f"`{top}` is the job's own module ({excluded.path}), which its image leaves out ({excluded.reason}), "
            f"so the cluster run would not find it either: take it out of that rule, or add `!{excluded.path}` "
            f"to {job_dir / '.vdkignore'}. Then {again}"
        )
    listed = Requirements.read(requirements if requirements.is_file() else None).listed_for(top)
    if listed:
        return (
            f"{listed} (which provides `{top}`) is in {requirements} but not installed where vdk runs: "
            f"`{sys.executable} -m pip install -r {requirements}`. Then {again}"
        )
    distribution = distribution_for(top)
    return (
        f"install {distribution} (which provides `{top}`) where vdk runs (`{sys.executable} -m pip install "
        f"{distribution}`) and {image}. Then {again}"
    )


def _missing_in_image_fix(error: dict[str, str], job_dir: Path, again: str) -> str:
    """A module the image lacks: what is installed where vdk runs is not in the image."""
    requirements = job_dir / "requirements.txt"
    missing = _NO_MODULE.search(error.get("message", ""))
    if not missing:
        return (
            "the image has another version of a package than the code needs: pin the version the code needs in "
            f"{requirements} (`<package>==<version>`), the image's dependency layer. Then {again}"
        )
    top = missing.group(1).split(".")[0]
    here = _distributions_here(top)
    if here:
        return (
            f"add {' or '.join(here)} to {requirements}: it provides `{top}` where vdk runs (which is why the "
            f"smoke run without --container passes), but the image has only what its base and requirements.txt "
            f"give it. Then {again}"
        )
    return (
        f"add the package that provides `{top}` to {requirements} (its name may differ from the module's): the "
        f"image has only what its base and requirements.txt give it. Then {again}"
    )


def _distributions_here(module: str) -> list[str]:
    """The installed distributions that provide a top-level module where vdk runs ("yaml" -> PyYAML)."""
    import importlib.metadata

    if not _importable_here(module):
        return []
    try:
        return sorted(set(importlib.metadata.packages_distributions().get(module, [])))
    except Exception:  # noqa: BLE001 - broken metadata of some package: no name to suggest
        return []


def _importable_here(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _excluded_module(run: LocalRun, top: str) -> Excluded | None:
    if run.work is None:
        return None
    for candidate in (f"{top}.py", top):
        if (run.plan.spec.job_dir / candidate).exists():
            return run.work.exclusion(candidate)
    return None


_NO_FILE = re.compile(r"No such file or directory: '([^']+)'")


def _excluded_file_fix(error: dict[str, str], run: LocalRun, again: str) -> str | None:
    """A file the job directory has but its image (and so the run's working directory) leaves out."""
    missing = _NO_FILE.search(error.get("message", ""))
    job_dir = run.plan.spec.job_dir
    if not missing or run.work is None:
        return None
    path = Path(missing.group(1))
    if path.is_absolute():
        if not path.is_relative_to(job_dir):
            return None
        path = path.relative_to(job_dir)
    excluded = run.work.exclusion(path.as_posix())
    if excluded is None or not (job_dir / path).exists():
        return None
    return (
        f"{path} is in the job directory, but its image leaves it out ({excluded.path}: {excluded.reason}), so the "
        "cluster run would not find it either; the smoke run runs in a copy of what the image holds. Read data "
        f"from storage the cluster can reach, or ship the file: add `!{excluded.path}` to {job_dir / '.vdkignore'}. "
        f"Then {again}"
    )


def _arguments_fix(plan: LaunchPlan, again: str) -> str:
    spec = plan.spec
    smoke = plan.mode == protocol.SMOKE
    key = spec.arguments_key(smoke)
    given = shlex.join(spec.arguments(smoke)) or "(none)"
    return (
        f"the script's argument parser refused its arguments: `{key} = {given}` in [ml-training] of "
        f"{spec.config_path}. Correct them (or the parser), then {again}"
    )


def _killed(rank: RankOutcome) -> bool:
    """Ended by SIGKILL (the out-of-memory killer's signal), or by a signal no one named (forked ranks)."""
    if rank.exit_code is not None:
        return rank.exit_code == -signal.SIGKILL
    return rank.died_abruptly and not rank.crash


def _memory_fix(outcome: RunOutcome, again: str) -> str:
    plan = outcome.run.plan
    peaks = [r.peak_memory for r in [*outcome.ranks, *filter(None, [outcome.launcher])] if r.peak_memory]
    machine = machine_memory_bytes()
    had = ""
    if peaks:
        had = f": the ranks had up to {_size(max(peaks))} each ({_size(sum(peaks))} together"
        had += f"; this machine has {_size(machine)})" if machine else ")"
    if plan.mode != protocol.SMOKE:
        return (
            f"a rank was killed by SIGKILL, most likely by the out-of-memory killer{had}. Lower the batch size in "
            f"`args`, or run fewer processes (`procs_per_node`). Then {again}"
        )
    spec = plan.spec
    smaller = _smaller_batch(spec.arguments(smoke=True))
    example = f" (e.g. `smoke_args = {shlex.join(smaller)}`)" if smaller else ""
    ranks = f" (one rank instead of {plan.ranks})" if plan.ranks > 1 else ""
    return (
        f"a rank was killed by SIGKILL, most likely by the out-of-memory killer{had}. A batch sized for a GPU is "
        f"too big for this machine's CPU run; the smoke run checks the code, not the batch: set "
        f"`smoke_processes = 1` in [ml-training]{ranks}, and `smoke_args` with a smaller batch{example}, "
        f"arguments that smoke runs use instead of `args`. Then {again}"
    )


_BATCH = re.compile(r"^(--?[\w-]*batch[\w-]*)(?:=(\d+))?$", re.IGNORECASE)


def _smaller_batch(arguments: tuple[str, ...]) -> list[str] | None:
    """The arguments with a quarter of the batch size, when one is recognisable (`--batch-size 64`)."""
    out = list(arguments)
    for i, argument in enumerate(out):
        match = _BATCH.match(argument)
        if not match:
            continue
        if match.group(2) is not None:
            out[i] = f"{match.group(1)}={max(1, int(match.group(2)) // 4)}"
            return out
        if i + 1 < len(out) and out[i + 1].isdigit():
            out[i + 1] = str(max(1, int(out[i + 1]) // 4))
            return out
    return None


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.0f} KB"


def _untrained_fix(outcome: RunOutcome, again: str) -> str:
    plan = outcome.run.plan
    gpus = plan.env.get(protocol.SMOKE_GPUS, "?")
    if any(protocol.SPAWNED_NOTHING in r.observed for r in [*outcome.ranks, *filter(None, [outcome.launcher])]):
        return (
            "mp.spawn was asked for 0 processes: check how the script computes nprocs (the smoke run's node has "
            f"{gpus} virtual GPU(s), `smoke_processes` in [ml-training]). Then {again}"
        )
    return (
        "a smoke run passes once every rank reaches optimizer.step() of a torch.optim optimizer. Check whether the "
        f"script needs more GPUs than the smoke run's node has ({gpus} virtual GPU(s): raise `smoke_processes` in "
        "[ml-training] for more), returns early (an argument, an empty dataset), or steps an optimizer that is not "
        f"a torch.optim.Optimizer. Then {again}"
    )


def format_agent_log(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").rstrip()
    except OSError:
        text = ""
    return f"--- torchrun's log ({path}) ---\n{text or '(empty)'}\n---"


def _rank_line(rank: RankOutcome, mode: str) -> str:
    facts = []
    if rank.steps is not None and (rank.steps or rank.rank != LAUNCHER_RANK):
        facts.append(_count(rank.steps, "step"))
    if isinstance(rank.last_loss, (int, float)):
        facts.append(f"last loss {rank.last_loss:.4g}")
    elif rank.last_loss:
        facts.append(f"last loss {rank.last_loss}")
    if rank.died_abruptly:
        status = rank.death()
        if rank.peak_memory:
            facts.append(f"peak memory {_size(rank.peak_memory)}")
    else:
        status = {
            protocol.STOPPED: "stopped as planned" if mode == protocol.SMOKE else "stopped",
            protocol.FINISHED: "the script ended",
            protocol.FAILED: "failed",
            protocol.STALLED: "stalled",
            protocol.RUNNING: "stopped unfinished",
        }.get(rank.status, "never started")
        if rank.crashed_at_exit:
            status += f", then {rank.death()} while Python shut down"
    return f"{rank.label}: {', '.join(facts + [status])}"


def _death_details(rank: RankOutcome, job_dir: Path) -> list[str]:
    lines = []
    stack = user_stack(rank.stack, job_dir)
    if stack:
        lines += ["", f"Python stack of {rank.label} when it died:", *stack]
    if rank.log:
        tail = _tail(rank.log, 15)
        if tail:
            lines += ["", f"last output of {rank.label} ({rank.log}):", *(f"  {t}" for t in tail)]
    return lines


def _stall_details(root: RankOutcome, outcome: RunOutcome) -> list[str]:
    """Where the stalled rank's threads were (innermost frame first), and where the others were stopped."""
    stall = root.stall or {}
    lines = ["", f"{root.label} exited with code {STALL_EXIT_CODE} (the stall watchdog); where it was:"]
    for thread in stall.get("threads") or []:
        frames = thread.get("frames") or []
        lines += [f"  thread {thread.get('name')} (most recent call first):", *(f"  {f}" for f in frames[:16])]
    for other in outcome.ranks:  # the ranks torchrun stopped: where they waited
        if other is not root and other.status == protocol.RUNNING:
            lines += _where(other, outcome.run.plan.spec.job_dir)
    return lines


def _where(rank: RankOutcome, job_dir: Path) -> list[str]:
    stack = user_stack(rank.stack, job_dir)
    if not stack:
        return [f"{rank.label}: no stack recorded"]
    return ["", f"{rank.label} was at:", *stack]


def _tail_text(path: Path, limit: int = 20000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()[-lines:]
    except OSError:
        return []


def _needs_gpu(error: dict[str, str]) -> bool:
    text = (error.get("message", "") + error.get("traceback", "")).lower()
    return any(word in text for word in ("cuda", "nccl", "gpu", "accelerator"))


def _count(n: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{n} {noun if n == 1 else plural}"
