"""The one top-level handler (cli/unexpected.py): an unexpected exception becomes one message with its type, its
words and where in the plugin it happened; a full disk names where, what is free and where to make room; click's
own endings, a signal and the plugin's errors pass through untouched; a verb's unexpected error ends it with exit
status 1 and that message, never silently."""

from __future__ import annotations

import errno
import re
import tempfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from vdk.plugin.ml_training.cli import unexpected
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.context import MLCommandError
from vdk.plugin.ml_training.errors import MLTrainingError


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as e:  # noqa: BLE001 - the error with its traceback, as a handler gets it
        return e


def test_an_unexpected_error_is_named_with_where_it_was_raised():
    error = unexpected.as_error(raised(KeyError("config")))
    assert error.problem.startswith("the command stopped on an unexpected error (raised in test_unexpected.py line ")
    assert error.problem.endswith("): KeyError: 'config'")
    assert "`vdk -v DEBUG ...`" in error.fix and "report it" in error.fix


def test_where_names_the_innermost_frame_of_the_plugin():
    from vdk.plugin.ml_training.units import parse_quantity

    try:
        parse_quantity(None)  # a bug: a wrong argument, deep inside
    except Exception as e:  # noqa: BLE001 - whatever the plugin's code raises for it
        where = unexpected.where(e)
    assert where.startswith(" in units.py line ") and "(parse_quantity)" in where


def test_the_plugin_s_own_errors_pass_as_they_are():
    error = MLTrainingError("a problem", "its fix")
    assert unexpected.as_error(error) is error


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_names_the_directory_of_the_file_being_written(tmp_path, code):
    written = tmp_path / "gone" / ".layer-1.tar.gz"  # its directory was removed with the unfinished files
    error = unexpected.as_error(raised(OSError(code, "No space left on device", str(written))))
    assert isinstance(error, unexpected.DiskFullError) and error.place == tmp_path
    assert error.problem.startswith(f"the disk is full at {tmp_path}: No space left on device while writing {written}")
    assert re.search(r"\(\d+(\.\d)? [KMGT]?B free there now", error.problem), error.problem
    assert error.fix.startswith(f"free space on the disk of {tmp_path}") and "then run the command again" in error.fix


def test_a_full_disk_in_the_temporary_directory_says_to_move_tmpdir(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    error = unexpected.disk_full(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x" / "f")))
    assert "set TMPDIR to a directory on a disk with room" in error.fix


def test_a_full_disk_behind_another_error_is_found(tmp_path):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as e:
        error = unexpected.as_error(e)
    assert isinstance(error, unexpected.DiskFullError)  # a write without a file: the fullest place vdk writes to
    assert error.place in (Path(tempfile.gettempdir()), unexpected.cache_root())


@pytest.mark.parametrize("passed", [click.UsageError("bad"), click.exceptions.Exit(0), KeyboardInterrupt()])
def test_click_s_endings_and_signals_pass_through(passed):
    with pytest.raises(type(passed)), unexpected.reported():
        raise passed


def test_an_unexpected_error_in_a_verb_ends_it_with_its_message():
    def boom(**kwargs):
        raise ZeroDivisionError("division by zero")

    group = click.Group("vdk")
    verb = verbs.Verb(
        name="show", help="", params=[click.Option(["-n", "--name"])], ml_only=(), is_ml=lambda kw: True, run_ml=boom
    )
    verbs.install(group, verb)
    result = CliRunner().invoke(group, ["show", "-n", "x"])
    assert result.exit_code == 1
    assert "Error: the command stopped on an unexpected error in cli/verbs.py line " in result.output
    assert "ZeroDivisionError: division by zero" in result.output


def test_reported_raises_a_click_error():
    with pytest.raises(MLCommandError) as e, unexpected.reported():
        raise ValueError("x")
    assert "ValueError: x" in e.value.error.problem
