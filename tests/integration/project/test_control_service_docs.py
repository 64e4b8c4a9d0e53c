"""The commands of the Control Service's chapters (docs/control-service*.md) exist with their options in vdk with
the Control Service CLI installed (.venv-cs), which this plugin wraps: its own verbs (`vdk login`, `vdk execute
--start --arguments`) and the plugin's. (Loading that CLI starts a process: this is no unit test.)"""

from __future__ import annotations

import pytest

from tests.support.vdk_cli import HAS_CONTROL_CLI
from tests.unit.project.test_docs_examples import check_command
from tests.unit.project.test_docs_examples import commands
from tests.unit.project.test_docs_examples import of_control_service
from tests.unit.project.test_docs_examples import root_with

pytestmark = [
    pytest.mark.needs_control_cli,
    pytest.mark.skipif(not HAS_CONTROL_CLI, reason="needs vdk-plugin-control-cli (run in .venv-cs)"),
]
CONTROL_SERVICE_COMMANDS = [(w, c) for w, c in commands() if of_control_service(w)]


@pytest.fixture(scope="module")
def root_command():
    from vdk.plugin.control_cli_plugin import vdk_plugin_control_cli

    return root_with(vdk_plugin_control_cli)


def test_the_chapters_show_commands():
    assert len(CONTROL_SERVICE_COMMANDS) >= 10


@pytest.mark.parametrize(("where", "command"), CONTROL_SERVICE_COMMANDS, ids=[w for w, _ in CONTROL_SERVICE_COMMANDS])
def test_every_command_of_the_control_service_chapters_exists_with_its_options(root_command, where, command):
    check_command(root_command, where, command)
