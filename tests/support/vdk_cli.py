"""The real `vdk` command line (vdk-core's entry through vdk-test-utils' CliEntryBasedTestRunner)
with this plugin (whose `vdk_command_line` installs the verbs), and optionally the Control Service
CLI, loaded."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from vdk.internal import cli_entry
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from vdk.plugin.ml_training import plugin as ml_plugin
from vdk.plugin.ml_training.local.launcher import RUNS_DIR_ENV

VDK = Path(sys.executable).with_name("vdk")  # the installed entry point
HAS_CONTROL_CLI = importlib.util.find_spec("vdk.plugin.control_cli_plugin") is not None


def vdk(*args: str, control_cli: bool = False, input: str | None = None):
    """Run `vdk ARGS` on a fresh root command (the real one is a global that earlier tests changed)."""
    plugins: list = [ml_plugin]
    if control_cli:
        from vdk.plugin.control_cli_plugin import vdk_plugin_control_cli

        plugins.insert(0, vdk_plugin_control_cli)
    root = copy.copy(cli_entry.cli)
    root.commands = {}
    extra = {"input": input} if input is not None else {}
    return CliEntryBasedTestRunner(*plugins).invoke(list(args), cli=root, **extra)


def vdk_run(job: Path | str, *options: str):
    """`vdk run [OPTIONS] JOB` in this process, on a fresh root command: its result's exit_code and output
    (`smoke_run` runs it as a user does, in a new process)."""
    return vdk("run", *options, str(job))


def vdk_process(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`vdk ARGS` as a user runs it: the installed entry point in a new process, with vdk's own
    logging set-up and the real stdout / stderr (what a test runner's capture would hide)."""
    command = [str(VDK), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)


# What `vdk run` says of a smoke run that passed: its seconds (group 1) and its processes (group 2).
SMOKE_PASSED = re.compile(r"smoke run PASSED in ([0-9.]+) s \((\d+) process(?:es)?\)")


def smoke_run(
    job: Path | str,
    *options: str,
    timeout: float = 300,
    smoke_timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`vdk run [OPTIONS] JOB` (a smoke run; `--full`: a full local run) as a user runs it, in a new process, without
    the session's VDK_ML_TRAINING_* settings but where local runs go; its stdout and stderr as one text, as a
    terminal shows them. `smoke_timeout`: vdk's own (VDK_ML_TRAINING_SMOKE_TIMEOUT, seconds), so that a hung run
    ends with its report before the test's `timeout`; `env`: settings the user gave (on top of the above)."""
    given = {} if smoke_timeout is None else {"VDK_ML_TRAINING_SMOKE_TIMEOUT": str(smoke_timeout)}
    given.update(env or {})
    command = [str(VDK), "run", *options, str(job)]
    return subprocess.run(
        command, env=user_environ(given), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


def start_vdk(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`vdk ARGS` started as a user starts it in a terminal (`smoke_run`'s environment; stdout and stderr as one
    text), still running: Ctrl-C (SIGINT) has its default even when the tests run in the background (a shell makes
    background processes ignore it)."""
    return subprocess.Popen(
        [str(VDK), *args],
        env=user_environ(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def user_environ(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment as a user's: without the session's VDK_ML_TRAINING_* settings but where local runs go
    (conftest), and with the settings `env` gives."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") or k == RUNS_DIR_ENV}
    return {**environ, **(env or {})}
