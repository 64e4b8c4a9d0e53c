"""What every ML verb needs from the vdk command line: its configuration, and one way to fail."""

from __future__ import annotations

from typing import Any
from typing import NoReturn

import click

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.settings import job_settings


def configuration() -> Any | None:
    """VDK's configuration: vdk passes its CoreContext as the click context's obj."""
    ctx = click.get_current_context(silent=True)
    core = getattr(ctx, "obj", None) if ctx else None
    return getattr(core, "configuration", None)


def settings_from_click() -> dict[str, Any]:
    """Cluster-wide defaults (registry, namespace, ...) from VDK configuration, for load_job_spec."""
    config = configuration()
    return job_settings(config) if config is not None else {}


class MLCommandError(click.ClickException):
    """An MLTrainingError as click shows it: the problem, then what to do, exit code 1."""

    def __init__(self, error: MLTrainingError):
        super().__init__(error.message)
        self.error = error


def fail(error: MLTrainingError) -> NoReturn:
    raise MLCommandError(error) from error
