"""The real `vdk` command line (vdk-core's entry through vdk-test-utils' CliEntryBasedTestRunner)
with this plugin (whose `vdk_command_line` installs the verbs), and optionally the Control Service
CLI, loaded."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from vdk.internal import cli_entry
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from vdk.plugin.ml_training import plugin as ml_plugin

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


def vdk_process(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`vdk ARGS` as a user runs it: the installed entry point in a new process, with vdk's own
    logging set-up and the real stdout / stderr (what a test runner's capture would hide)."""
    command = [str(Path(sys.executable).with_name("vdk")), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
