"""Checks that run before vdk-core touches a job: a job meant as ml-training whose config.ini is
broken (vdk-core then fails with a traceback while loading it) or misnamed (vdk-core would run it
as a data job, "successfully" running nothing)."""

from __future__ import annotations

from pathlib import Path

import click

from vdk.plugin.ml_training.cli.context import keep_before_click
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import ml_config_problem
from vdk.plugin.ml_training.job.config_file import read_job_config

# Options of `vdk run` that take a value: the job directory is the first other argument.
_RUN_OPTIONS_WITH_VALUE = ("--arguments", "--set", "--args")


def run_job_dir(command_line_args: list[str]) -> Path | None:
    """The job directory of a `vdk [OPTIONS] run [OPTIONS] JOB_DIR` command line, else None."""
    args = list(command_line_args or [])
    if "run" not in args:
        return None
    rest = iter(args[args.index("run") + 1 :])
    for arg in rest:
        if arg in _RUN_OPTIONS_WITH_VALUE:
            next(rest, None)
        elif arg.startswith(tuple(f"{option}=" for option in _RUN_OPTIONS_WITH_VALUE)):
            continue
        elif not arg.startswith("-"):
            return Path(arg)
    return None


def refuse_broken_ml_config(command_line_args: list[str]) -> None:
    """Exit with the problem and its fix if `vdk run` got a job meant as ml-training that is not one."""
    job_dir = run_job_dir(command_line_args)
    if job_dir is None or not job_dir.is_dir():
        return
    try:
        config = read_job_config(job_dir)
    except JobConfigError:
        config = None
    if config is not None and config.is_ml:
        keep_before_click(config)  # the command reads config.ini no more
        return
    problem = ml_config_problem(job_dir)
    if problem is not None:
        click.echo(f"Error: {problem.message}", err=True)
        raise SystemExit(2)
