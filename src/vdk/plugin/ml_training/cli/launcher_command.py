"""`vdk run ./<job>` in the VDK Control Service's data-job pod, where its operator set `ml_training_launcher =
true`: the launcher (ops/cs_launch.py), its lines into the pod's log (the execution's log: `vdk execute --logs`),
and its outcome as the Control Service reads it, the `status` of the container's termination message. vdk-core
writes that message too, at exit (`vdk_exit`); the plugin's own `vdk_exit` runs after it (trylast) and writes the
launcher's. vdk exits 0 whatever the run did: the Control Service's last release takes a failed Kubernetes Job
for one still running."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from vdk.plugin.ml_training.cli.cluster_follow import show_end
from vdk.plugin.ml_training.cli.cluster_follow import show_failure
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.keys import key
from vdk.plugin.ml_training.job.settings import setting

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

    from vdk.plugin.ml_training.ops import cs_launch

    state = context.core_context.state
    say = _line
    try:
        execution = cs_launch.Execution(
            execution_id=str(state.get(CommonStoreKeys.EXECUTION_ID)),
            attempt_id=str(state.get(CommonStoreKeys.ATTEMPT_ID)),
            job_name=context.job_directory.name,
            team=os.environ.get(TEAM_VARIABLE) or None,
            arguments=cs_launch.parse_arguments(arguments),
        )
        views = cs_launch.Views(say=say, rank0=lambda line: _line(f"[rank 0] {line}"), failed=show_failure,
                                ended=show_end)  # fmt: skip
        outcome = cs_launch.launch(
            execution,
            cs_launch.job_directory(context.job_directory),
            context.core_context.configuration,
            views,
        )
    except MLTrainingError as e:
        say(f"error: {e.problem}")
        outcome = cs_launch.LaunchOutcome(cs_launch.USER_ERROR, None, e.problem)
    except KeyboardInterrupt:
        _pending[:] = [cs_launch.PLATFORM_ERROR]  # stopped, not cancelled: the next attempt follows the run
        raise
    say(f"execution ends: {outcome.status} ({outcome.why})")
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


def _line(text: str) -> None:
    click.echo(text)
    sys.stdout.flush()
