"""Which job directory a `vdk run` command line names, found by the pre-flight before vdk-core reads it
(cli/preflight.py): the argument after `run` and its options, none for other verbs or without one. (The
real `vdk` CLI on broken or misnamed config.ini files: tests/integration/cli/test_preflight_vdk_cli.py.)"""

from pathlib import Path

import pytest

from vdk.plugin.ml_training.cli.preflight import run_job_dir


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "job"], "job"),
        (["-v", "DEBUG", "run", "--full", "job"], "job"),
        (["run", "--arguments", "{}", "job"], "job"),
        (["deploy", "-p", "job"], None),
        (["run"], None),
    ],
)
def test_the_job_dir_of_a_run_command_line(args, expected):
    assert run_job_dir(args) == (Path(expected) if expected else None)
