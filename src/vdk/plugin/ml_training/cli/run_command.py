"""`vdk run JOB` for ml-training jobs: the flags added to vdk-core's own `run` command (--full, --container,
--skip-import-check), and the body of the `run_job` hook: the local run (ops/local_run.py), shown as it goes
(cli/local_summary.py), returned as VDK's execution result."""

from __future__ import annotations

import contextvars
import functools
from datetime import datetime
from datetime import timezone
from typing import Any

import click

from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli.local_summary import SummaryPrinter
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.image.build_progress import StderrProgress
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.ops import local_run
from vdk.plugin.ml_training.ops.imports import SKIP_OPTION

# `vdk run --full` / `--container` / `--skip-import-check` for this invocation; the click group outlives
# invocations, so the flags are set per call by the wrapped callback, never left behind.
_full_requested: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_full", default=False)
_container_requested: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_container", default=False)
_skip_import_check: contextvars.ContextVar[bool] = contextvars.ContextVar("vdk_ml_training_skip_imports", default=False)


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


def run_ml_job(context: Any) -> Any:
    """The `run_job` hook's work for an ml-training job: returns VDK's ExecutionResult."""
    started = _utc_now()
    step_name = "config.ini"
    with interrupts.stop_on_signals():
        try:
            configuration = context.core_context.configuration
            spec = load_job_spec(context.job_directory, job_settings(configuration, context.job_directory))
            step_name = str(spec.entrypoint)
            result = local_run.run_job(
                spec,
                configuration,
                SummaryPrinter(),
                full=_full_requested.get(),
                container=_container_requested.get(),
                check_imports=not _skip_import_check.get(),
                data_progress=StderrProgress(),
            )
            error: BaseException | None = result.error
        except MLTrainingError as e:
            error = e
        except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: what was started is stopped already
            interrupts.exit_interrupted(e)
    return _execution_result(context, step_name, started, error)


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
