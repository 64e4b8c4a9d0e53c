"""The job's loops, compiled with their marks: the code runs as written (its lines, its tracebacks, its `break`,
`continue` and `else:`), and a Leave raised for one run of one loop unwinds to it (the `finally` blocks on the way
run) and breaks out of it, so the code after the loop runs; a Leave for another loop goes on past it."""

from __future__ import annotations

import sys
import textwrap
import traceback
from pathlib import Path

import pytest

from vdk.plugin.ml_training.runtime import training_loops
from vdk.plugin.ml_training.runtime.steps import LeaveLoop
from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached

SCRIPT = """
    def train(events, leave_at):
        for epoch in range(3):
            try:
                for step in range(4):
                    events.append((epoch, step))
                    if (epoch, step) == leave_at:
                        events.append(leave(sys._getframe()))
            finally:
                events.append(f"finally {epoch}")
        else:
            events.append("else")
        events.append("after the loop")
"""


def load(tmp_path: Path, monkeypatch, source: str, **names) -> dict:
    """`source` compiled as the job's train.py in `tmp_path`, run as a module with `names`: its namespace."""
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(source))
    monkeypatch.setattr(training_loops, "_roots", (str(tmp_path.resolve()),))
    namespace: dict = {"__name__": "job", training_loops.NAME: training_loops, "sys": sys, **names}
    exec(training_loops.compile_marked(path.read_bytes(), str(path)), namespace)
    return namespace


def leave_outer(frame) -> str:
    """Leave the outermost run of a loop `frame` is in, as the end of training does."""
    site = training_loops.enclosing(frame)[-1]
    raise LeaveLoop(2, site.frame, site.loop.id, site.loop.where())


def test_a_leave_breaks_out_of_the_loop_it_names_and_the_code_after_it_runs(tmp_path, monkeypatch):
    job = load(tmp_path, monkeypatch, SCRIPT)
    job["leave"] = leave_outer
    events: list = []
    job["train"](events, leave_at=(0, 1))
    assert events == [(0, 0), (0, 1), "finally 0", "after the loop"]  # no else: the loop was left, as by break


def test_a_loop_of_the_module_itself_is_left_too(tmp_path, monkeypatch):
    source = """
        events = []
        for epoch in range(3):
            events.append(epoch)
            if epoch == 1:
                leave(sys._getframe())
        else:
            events.append("else")
        events.append("after the loop")
    """
    job = load(tmp_path, monkeypatch, source, leave=leave_outer)
    assert job["events"] == [0, 1, "after the loop"]
    assert "__vdk_loop_" in " ".join(training_loops.compile_marked(textwrap.dedent(source), "train.py").co_names)


def test_the_loops_a_point_of_the_code_is_in_are_named_innermost_first_with_their_lines(tmp_path, monkeypatch):
    job = load(tmp_path, monkeypatch, SCRIPT)
    seen: list = []
    job["leave"] = lambda frame: seen.append(training_loops.enclosing(frame)) or "looked"
    job["train"]([], leave_at=(1, 2))
    (inner, outer) = seen[0]
    assert (inner.loop.where(), outer.loop.where()) == ("train.py:5", "train.py:3")
    assert inner.frame == outer.frame and inner.run != outer.run


def test_marked_code_runs_as_written_when_nothing_leaves(tmp_path, monkeypatch):
    job = load(
        tmp_path,
        monkeypatch,
        """
        def collect():
            out = []
            n = 0
            while True:
                n += 1
                if n % 2:
                    continue
                if n > 8:
                    break
                out.append(n)
            for x in []:
                pass
            else:
                out.append("else")
            return out, [y * 2 for y in range(3)]

        def fails():
            for i in range(3):
                if i == 1:
                    raise ValueError("at one")
        """,
    )
    assert job["collect"]() == ([2, 4, 6, 8, "else"], [0, 2, 4])
    with pytest.raises(ValueError) as raised:
        job["fails"]()
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (Path(frame.filename).name, frame.lineno, frame.line) == ("train.py", 21, 'raise ValueError("at one")')


def test_a_leave_for_another_loop_goes_on_past_this_one(tmp_path, monkeypatch):
    job = load(
        tmp_path,
        monkeypatch,
        """
        def inner(events):
            for i in range(3):
                events.append(i)
                leave()

        def outer(events):
            for epoch in range(2):
                inner(events)
            events.append("after outer")
        """,
    )

    def leave_from_outer():
        # what the end of training raises where the inner loop runs: for the outer loop's run, a caller's
        site = training_loops.enclosing(sys._getframe(1))[-1]
        assert site.loop.where() == "train.py:8"
        raise LeaveLoop(1, site.frame, site.loop.id, site.loop.where())

    job["leave"] = leave_from_outer
    events: list = []
    job["outer"](events)
    assert events == [0, "after outer"]


def test_an_uncaught_leave_ends_the_process_as_the_smoke_steps_do():
    assert issubclass(LeaveLoop, SmokeStepsReached)


def test_a_file_that_does_not_parse_is_compiled_as_written(tmp_path):
    with pytest.raises(SyntaxError) as raised:
        training_loops.compile_marked(b"for x in y\n    pass\n", str(tmp_path / "broken.py"))
    assert raised.value.lineno == 1


def test_only_the_jobs_own_files_are_marked(tmp_path, monkeypatch):
    monkeypatch.setattr(training_loops, "_roots", (str(tmp_path.resolve()),))
    assert training_loops.is_job_file(str(tmp_path / "train.py"))
    assert training_loops.is_job_file(str(tmp_path / "pkg" / "model.py"))
    assert not training_loops.is_job_file(str(tmp_path / "venv" / "lib" / "site-packages" / "torch" / "x.py"))
    assert not training_loops.is_job_file("/usr/lib/python3.11/json/__init__.py")
