"""`vdk run` of an ml-training job without VDK's data-job chatter around its summary: vdk-core's run command logs,
at INFO, its banner (version, a 300-character `Build details` line, the installed plugins), `Run job with
directory ...` and, once the job ran, a timestamped `Job execution result` with `Step results` — about a dozen
lines wrapped around a six-line summary. Those records are dropped for an ml-training job, through vdk-core's own
logging (a filter on its run command's logger; its configuration resets levels, not filters), unless the user asks
for VDK's logs: `vdk -v LEVEL run ...` or `VDK_LOG_LEVEL_VDK` / `LOG_LEVEL_VDK` set. Its warnings and errors
always pass. The step result was where vdk-core printed the run's error: quieted, the plugin prints it as the other
verbs do (`Error: ...` with its fix)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import click

# vdk-core's `vdk run` command: the logger of its banner, its `Run job with directory` and its step results.
VDK_RUN_LOGGER = "vdk.internal.builtin_plugins.run.cli_run"
# How a user asks for VDK's own logs: vdk's `-v LEVEL` (click-log's option of the root command), or vdk-core's
# setting of its loggers' level.
VERBOSITY_PARAMETER = "verbosity"
LOG_LEVEL_VARIABLES = ("VDK_LOG_LEVEL_VDK", "LOG_LEVEL_VDK")


class _BelowWarning(logging.Filter):
    """Lets through what warns or fails, nothing chattier."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def verbose_asked() -> bool:
    """Whether the user asked for VDK's logs: `vdk -v LEVEL` on this command line, or VDK's log level set."""
    if any(os.environ.get(name, "").strip() for name in LOG_LEVEL_VARIABLES):
        return True
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    root = ctx.find_root()
    if not any(p.name == VERBOSITY_PARAMETER for p in root.command.params):
        return False
    source = root.get_parameter_source(VERBOSITY_PARAMETER)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


@contextmanager
def quiet_vdk_run(quiet: bool) -> Iterator[bool]:
    """While it lasts, vdk-core's run command logs only warnings and errors, when `quiet` and the user asked for
    no VDK logs; yields whether it quiets them."""
    if not quiet or verbose_asked():
        yield False
        return
    logger = logging.getLogger(VDK_RUN_LOGGER)
    below = _BelowWarning()
    logger.addFilter(below)
    try:
        yield True
    finally:
        logger.removeFilter(below)
