"""VDK hook implementations of vdk-ml-training. Only hooks live here; the logic is in plain modules."""

from __future__ import annotations

import warnings

from vdk.api.plugin.hook_markers import hookimpl

from vdk.plugin.ml_training.cli.context import is_ml_dir
from vdk.plugin.ml_training.job.settings import CONFIG_KEYS


@hookimpl
def vdk_start(plugin_registry, command_line_args) -> None:
    """`vdk run JOB` of a job meant as ml-training whose config.ini is broken or misnamed: say so
    now, before vdk-core reads config.ini (it fails with a traceback) or runs it as a data job.
    Then keep stdout clean while vdk-core configures itself (it prints a blank line)."""
    from vdk.plugin.ml_training.cli import clean_stdout
    from vdk.plugin.ml_training.cli.preflight import refuse_broken_ml_config

    refuse_broken_ml_config(command_line_args)
    clean_stdout.begin()


@hookimpl
def vdk_initialize(context) -> None:
    from vdk.plugin.ml_training.cli import clean_stdout

    clean_stdout.end()


@hookimpl
def vdk_configure(config_builder) -> None:
    for key, (default, description) in CONFIG_KEYS.items():
        config_builder.add(key=key, default_value=default, show_default_value=True, description=description)


@hookimpl
def vdk_command_line(root_command) -> None:
    """`vdk run --full/--container`, and deploy (list, show, execute, delete) for ML jobs. The Control Service
    CLI's commands, when installed, are wrapped: its hook is tryfirst, so they exist by now."""
    from vdk.plugin.ml_training.cli.commands import install_all
    from vdk.plugin.ml_training.cli.run_command import add_run_flags

    add_run_flags(root_command)
    install_all(root_command)
    # vdk-control-cli declares `-v` twice on deploy; click warns about it on every wrapped deploy.
    warnings.filterwarnings("ignore", message="The parameter -v is used more than once", category=UserWarning)


@hookimpl(tryfirst=True)
def run_job(context):
    """ml-training jobs: a smoke run (or full local run) instead of VDK's data job steps.
    Anything else: None, so vdk-core runs the data job's steps as always."""
    if context.job_directory is None or not is_ml_dir(context.job_directory):
        return None
    from vdk.plugin.ml_training.cli.run_command import run_ml_job

    return run_ml_job(context)


@hookimpl(trylast=True)
def vdk_exit(context, exit_code) -> None:
    """The launcher's outcome (a `vdk run` in the VDK Control Service's data-job pod) as the container's
    termination message: after vdk-core's own, which it replaces."""
    from vdk.plugin.ml_training.cli.launcher_command import write_termination_message

    write_termination_message(context.configuration)
