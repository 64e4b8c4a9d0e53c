"""`vdk run ./<job>` in the VDK Control Service's data-job pod, where its operator set `ml_training_launcher =
true`: the launcher (ops/cs_launch.py), its lines into the pod's log (the execution's log: `vdk execute --logs`),
and its outcome as the Control Service reads it, the `status` of the container's termination message. vdk-core
writes that message too, at exit (`vdk_exit`); the plugin's own `vdk_exit` runs after it (trylast) and writes the
launcher's. vdk exits 0 whatever the run did: the Control Service's last release takes a failed Kubernetes Job
for one still running."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING
from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli.cluster_follow import show_end
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.job.keys import key
from vdk.plugin.ml_training.job.settings import setting

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import JobSelection
    from vdk.plugin.ml_training.api import RunSummary

LAUNCHER = key("launcher").setting_name
# The data-job pod's team (the Control Service sets it from the job's team).
TEAM_VARIABLE = "VDK_JOB_TEAM"
# vdk-core's setting of the termination message's file (default /dev/termination-log).
TERMINATION_FILE = "TERMINATION_MESSAGE_WRITER_OUTPUT_FILE"
_TRUE = ("true", "1", "yes", "on")
_pending: list[str] = []  # the status the launcher ended with, for vdk_exit


def is_launcher(configuration: Any) -> bool:
    """Whether this `vdk run` is the launcher (the setting, from the Control Service's vdkOptions)."""
    value, _ = setting(configuration, LAUNCHER)
    return str(value or "").strip().lower() in _TRUE


def launch_execution(context: Any, arguments: str | None) -> None:
    """The `run_job` hook's work in a data-job pod: the launcher; its outcome is kept for the termination message
    (the hook then returns a successful ExecutionResult: see above)."""
    from vdk.internal.core.statestore import CommonStoreKeys

    state = context.core_context.state
    reporter = LauncherConsole()
    try:
        outcome = api.launch_execution(
            str(state.get(CommonStoreKeys.EXECUTION_ID)),
            str(state.get(CommonStoreKeys.ATTEMPT_ID)),
            context.job_directory.name,
            os.environ.get(TEAM_VARIABLE) or None,
            arguments,
            context.job_directory,
            context.core_context.configuration,
            reporter=reporter,
        )
    except KeyboardInterrupt:
        # stopped, not cancelled: the next attempt follows the run
        _pending[:] = [api.LaunchOutcome.interrupted().status]
        raise
    if outcome.followed is not None:
        show_end(outcome.followed)
    reporter.note(f"execution ends: {outcome.status} ({outcome.why})")
    _pending[:] = [outcome.status]


def write_termination_message(configuration: Any) -> None:
    """The launcher's status as the container's termination message (vdk_exit, after vdk-core's own)."""
    if not _pending:
        return
    from vdk.internal.builtin_plugins.version.version import get_version

    status = _pending.pop()
    path = str(configuration.get_value(TERMINATION_FILE) or "")
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"vdk_version": get_version(), "status": status}))
    except OSError as e:
        click.echo(f"vdk-ml-training launcher: cannot write the termination message to {path}: {e}", err=True)


class LauncherConsole(Console):
    """Everything the launcher says goes into the pod's log, the execution's: its notes on stdout with rank 0's
    lines (click.echo flushes each line)."""

    def __init__(self) -> None:
        super().__init__(runs_err=False, notes_err=False)

    def following(self, run: RunSummary, selection: JobSelection | None) -> None:
        self.followed = (run, selection)
        self.note(f"following run {run.name}: rank 0's output, and the last lines of any rank that fails")
