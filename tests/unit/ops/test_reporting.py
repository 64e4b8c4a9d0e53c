"""The one reporting parameter of the use cases (ops/reporting.py): quiet unless told, and the reporter a
notebook takes off the shelf shows notes and progress on stderr, never on stdout (the caller's)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from vdk.plugin.ml_training.ops.reporting import QUIET
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import StderrReporter
from vdk.plugin.ml_training.ops.reporting import or_quiet


def _events() -> list[str]:
    return [name for name, _ in inspect.getmembers(Reporter, inspect.isfunction) if not name.startswith("_")]


def test_the_quiet_reporter_shows_nothing_of_any_event(capfd):
    for name in _events():
        arguments = [object()] * (len(inspect.signature(getattr(Reporter, name)).parameters) - 1)
        getattr(QUIET, name)(*arguments)
    transfer = QUIET.progress.transfer("layer", 100 * 1024 * 1024)
    transfer.advance(10)
    transfer.close()
    QUIET.progress.stage("building")
    assert capfd.readouterr() == ("", "")


def test_none_is_the_quiet_reporter_and_a_given_one_is_kept():
    mine = StderrReporter()
    assert or_quiet(None) is QUIET and or_quiet(mine) is mine


def test_the_stderr_reporter_shows_notes_and_progress_on_stderr_only(capfd):
    shown = StderrReporter()
    shown.note("Pre-flight: checking at once cluster, registry")
    shown.progress.stage("Building the dependency layer")
    shown.run_ended(object())  # a result says it all: not shown
    out, err = capfd.readouterr()
    assert out == ""
    assert err == "Pre-flight: checking at once cluster, registry\nBuilding the dependency layer\n"


def test_the_page_documents_every_event_of_the_reporter_and_no_other():
    page = (Path(__file__).resolve().parents[3] / "docs" / "python-api.md").read_text()
    section = page.split("## What a reporter is told", 1)[1]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name for cell in first_cells for name in re.findall(r"`(\w+)[(`]", cell)}
    assert documented == {*_events(), "progress"}
    assert isinstance(inspect.getattr_static(Reporter, "progress"), property)
