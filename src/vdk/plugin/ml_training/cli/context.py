"""What every ML verb needs from the vdk command line: its configuration, the job's config.ini read once per
command, and one way to fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from typing import NoReturn

import click

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import read_job_config
from vdk.plugin.ml_training.job.settings import Settings
from vdk.plugin.ml_training.job.settings import job_settings

_CONFIGS_KEY = "vdk_ml_training.job_configs"

# `vdk run`'s config.ini as vdk_start read it, before click started (cli/preflight.py): the command's first ask
# takes that reading over, if the file is still as it was read (tests run several commands in one process).
_BEFORE_CLICK: dict[Path, tuple[tuple[int, ...], JobConfig]] = {}


def _signature(path: Path) -> tuple[int, ...] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def keep_before_click(config: JobConfig) -> None:
    """Keep a reading of config.ini taken before click started, for the command that follows."""
    signature = _signature(config.path)
    _BEFORE_CLICK.clear()
    if signature is not None:
        _BEFORE_CLICK[config.job_dir.resolve()] = (signature, config)


def _taken_before_click(key: Path) -> JobConfig | None:
    signature, config = _BEFORE_CLICK.pop(key, (None, None))
    if config is None or signature != _signature(config.path):
        return None
    return config


def configuration() -> Any | None:
    """VDK's configuration: vdk passes its CoreContext as the click context's obj."""
    ctx = click.get_current_context(silent=True)
    core = getattr(ctx, "obj", None) if ctx else None
    return getattr(core, "configuration", None)


def job_config(job_dir: Path | str) -> JobConfig:
    """The config.ini of `job_dir`, read once per command: whoever asks within one invocation (whether it is for
    ML, its settings, its spec or its scope) gets the same reading (click's context keeps it, as long as the
    command runs). JobConfigError when it cannot be read (asked again, read again: that is a failing command)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return read_job_config(job_dir)
    configs = ctx.meta.setdefault(_CONFIGS_KEY, {})
    key = Path(job_dir).resolve()
    if key not in configs:
        configs[key] = _taken_before_click(key) or read_job_config(job_dir)
    return configs[key]


def is_ml_dir(job_dir: Path | str) -> bool:
    """Whether `job_dir`'s config.ini says `[job] type = ml-training` (read once per command; unreadable: no)."""
    try:
        return job_config(job_dir).is_ml
    except JobConfigError:
        return False


def settings_from_click(job: Path | JobConfig | None = None) -> Settings:
    """Cluster-wide defaults (registry, namespace, ...) from VDK configuration, for load_job_spec: the
    environment, else [vdk] of the config.ini of `job` (the verb's job, when it has one)."""
    return job_settings(configuration(), job)


# Where an option's value came from, when the user gave it (not a default).
EXPLICIT_SOURCES = ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def team_option(team: str | None, param: str = "team") -> tuple[str | None, str | None]:
    """(-t as the user gave it, VDK's default team) for a verb's `team` parameter.

    With the Control Service CLI installed, its `-t` defaults to the default team: only a value the user
    gave is an option. A default from VDK's default map (plugins' `get_default_commands_options`) is a
    default team; otherwise the default team is the one `vdk set-default -t TEAM` wrote."""
    from vdk.plugin.ml_training.job import teams

    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(param) if ctx is not None else None
    if source is not None and source.name in EXPLICIT_SOURCES:
        return team, None
    if source is not None and source.name == "DEFAULT_MAP" and team:
        return None, team
    return None, teams.default_team()


class MLCommandError(click.ClickException):
    """An MLTrainingError as click shows it: the problem, then what to do, exit code 1."""

    def __init__(self, error: MLTrainingError):
        super().__init__(error.message)
        self.error = error


def fail(error: MLTrainingError) -> NoReturn:
    raise MLCommandError(error) from error
