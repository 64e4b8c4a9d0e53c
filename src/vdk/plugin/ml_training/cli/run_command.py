"""`vdk run JOB` for ml-training jobs: the options added to vdk-core's own `run` command (--full, --container,
--skip-import-check, --set KEY=VALUE, --args) and its help, and the body of the `run_job` hook: the local run
(`api.run_job`; for a sweep its smoke check or its trials), shown as it goes (cli/console.py) and rendered when it
ends (a sweep's table: cli/sweep_views.py), returned as VDK's execution result."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import logging
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli import launcher_command
from vdk.plugin.ml_training.cli import unexpected
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.cli.context import is_ml_dir
from vdk.plugin.ml_training.cli.context import job_config
from vdk.plugin.ml_training.cli.quiet_run import quiet_vdk_run
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.config_file import CONFIG_FILE
from vdk.plugin.ml_training.job.config_file import JOB_TYPE
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.job.overrides import ARGS_OPTION
from vdk.plugin.ml_training.job.overrides import SET_OPTION
from vdk.plugin.ml_training.ops.imports import SKIP_OPTION


@dataclass(frozen=True)
class RunOptions:
    """The ml-training options of one `vdk run` invocation."""

    full: bool = False
    container: bool = False
    skip_import_check: bool = False
    sets: tuple[str, ...] = ()  # --set KEY=VALUE
    args: str | None = None  # --args TEXT
    arguments: str | None = None  # vdk-core's --arguments (a data job's JSON): refused for ml-training jobs
    quiet: bool = False  # vdk-core's banner and step results left out (cli/quiet_run.py): the error is said here

    @property
    def ml_only(self) -> list[str]:
        """The ml-training options given (a data job gets an error for them)."""
        given = [("--full", self.full), ("--container", self.container), (SKIP_OPTION, self.skip_import_check)]
        given += [(SET_OPTION, bool(self.sets)), (ARGS_OPTION, self.args is not None)]
        return [flag for flag, on in given if on]


# This invocation's options: the click group outlives invocations, so they are set per call by the wrapped
# callback, never left behind.
_NO_OPTIONS = RunOptions()  # frozen: one instance serves every invocation without options
_options: contextvars.ContextVar[RunOptions] = contextvars.ContextVar("vdk_ml_training_run", default=_NO_OPTIONS)

RUN_HELP = """

ml-training jobs (config.ini `[job] type = ml-training`, see docs/job-format.md): `vdk run JOB` is a smoke check
of the training script on this machine's CPU: every rank on virtual GPUs, a few optimizer steps, the end of the
first epoch, in a copy of what the job's image holds; it fails where a GPU or the cluster would, with the fix.
--full trains to completion here, --container runs in the job's image. --set KEY=VALUE and --args TEXT override
[ml-training] keys for this run (`vdk run JOB --set smoke_steps=3 --args "--lr 1e-3"`); --arguments (a data job's
JSON) does not apply to them."""


def add_run_flags(root_command: click.Group) -> None:
    """Give vdk-core's `run` command the options of ml-training jobs; applying it twice changes nothing."""
    run = root_command.commands.get("run")
    if run is None or any(p.name == "set_values" for p in run.params):
        return
    run.params += [
        click.Option(
            ["--full"],
            is_flag=True,
            help="ml-training jobs: train to completion with torchrun on this machine's GPUs (no CPU stand-ins, no "
            "step limit; the datasets of [ml-training.data] fetched whole, not a sample) instead of the smoke run. "
            f"Same as {variable('run_mode')}=full.",
        ),
        click.Option(
            ["--container"],
            is_flag=True,
            help="ml-training jobs: run inside the job's image, the one `vdk deploy` pushes, with podman or docker "
            f"(the smoke run, or with --full the whole run). Same as {variable('run_mode')}=container.",
        ),
        click.Option(
            [SKIP_OPTION],
            is_flag=True,
            help="ml-training jobs: do not check first that the job's image has every module the job imports (for "
            "a false alarm; `import_check = false` in [ml-training] does the same).",
        ),
        click.Option(
            [SET_OPTION, "set_values"],
            multiple=True,
            metavar="KEY=VALUE",
            help="ml-training jobs: a key of [ml-training] for this run only, e.g. --set smoke_steps=3 (repeatable); "
            "config.ini is not changed.",
        ),
        click.Option(
            [ARGS_OPTION, "ml_args"],
            metavar="TEXT",
            help="ml-training jobs: the entrypoint's arguments for this run, instead of `args`, e.g. --args \"--lr "
            '1e-3" (same as --set args=...).',
        ),
    ]
    run.help = inspect.cleandoc(run.help or "") + RUN_HELP
    original = run.callback
    assert original is not None  # vdk-core's `run` has its callback

    @functools.wraps(original)
    def callback(*args: Any, **kwargs: Any) -> Any:
        options = RunOptions(
            full=bool(kwargs.pop("full", False)),
            container=bool(kwargs.pop("container", False)),
            skip_import_check=bool(kwargs.pop("skip_import_check", False)),
            sets=tuple(kwargs.pop("set_values", None) or ()),
            args=kwargs.pop("ml_args", None),
            arguments=kwargs.get("arguments"),
        )
        job_dir = kwargs.get("data_job_directory")
        ml = job_dir is not None and is_ml_dir(job_dir)
        if options.ml_only and job_dir and not ml:
            raise click.UsageError(f"{', '.join(options.ml_only)} applies to ml-training jobs only")
        with quiet_vdk_run(ml) as quiet:
            token = _options.set(dataclasses.replace(options, quiet=quiet))
            try:
                return original(*args, **kwargs)
            finally:
                _options.reset(token)

    run.callback = callback


def run_ml_job(context: Any) -> Any:
    """The `run_job` hook's work for an ml-training job: returns VDK's ExecutionResult."""
    started = _utc_now()
    step_name = CONFIG_FILE
    with interrupts.stop_on_signals():
        try:
            options = _options.get()
            configuration = context.core_context.configuration
            if launcher_command.is_launcher(configuration):  # the VDK Control Service's data-job pod
                launcher_command.launch_execution(context, options.arguments)
                return _execution_result(context, "launcher", started, None)
            if options.arguments:
                raise MLTrainingError(
                    "--arguments passes JSON arguments to a data job's steps; an ml-training job's entrypoint takes "
                    "a command line instead",
                    f'give this run its arguments with {ARGS_OPTION} (`vdk run JOB {ARGS_OPTION} "--lr 1e-3"`), or '
                    "set `args = ...` in [ml-training] of config.ini",
                )
            overrides = api.parse_overrides(options.sets, options.args)
            config = job_config(context.job_directory)  # read once: for the settings and the spec
            spec = api.job_spec(config, overrides=overrides, configuration=configuration)
            step_name = str(spec.entrypoint)
            # the runs' start lines and summaries on stdout, with the notes; a sweep's notes beside its table: stderr
            console = Console(runs_err=False, notes_err=spec.sweep is not None)
            result = api.run_job(
                spec,
                full=options.full,
                container=options.container,
                check_imports=not options.skip_import_check,
                configuration=configuration,
                reporter=console,
            )
            if spec.sweep is not None:
                _show_sweep(result)
            error: BaseException | None = result.error
        except MLTrainingError as e:
            error = e
        except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: what was started is stopped already
            interrupts.exit_interrupted(e)
        except Exception as e:  # the one top-level handler (cli/unexpected.py): said with its cause, never dropped
            logging.getLogger(__name__).debug("The unexpected error, as Python saw it:", exc_info=True)
            error = unexpected.as_error(e)
    if error is not None and _options.get().quiet:  # vdk-core's step results, which said it, are left out
        click.echo(f"Error: {error.message if isinstance(error, MLTrainingError) else error}", err=True)
    return _execution_result(context, step_name, started, error)


def _show_sweep(result: api.LocalJobResult) -> None:
    """A sweep's smoke check: the table of its checked trials; its trials in full: the trial table, and where the
    study is."""
    from vdk.plugin.ml_training.cli.sweep_views import smoke_text
    from vdk.plugin.ml_training.cli.sweep_views import trial_table_text

    if isinstance(result, api.SweepSmoke):
        click.echo(smoke_text(result))
    elif isinstance(result, api.LocalSweep):
        click.echo(trial_table_text(result.table))
        click.echo(f"The study: {result.study}", err=True)


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
    step = StepResult(step_name, JOB_TYPE, started, ended, status, None, error, blamee)
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
