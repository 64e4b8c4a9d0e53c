"""Which runs `vdk show --board` puts on a board and how their event files are laid out (ops/boards.py): this
machine's full runs and sweeps as the launcher and the local sweep leave them, chosen by name or the newest."""

from __future__ import annotations

import os
import sqlite3

import pytest

from vdk.plugin.ml_training.dependencies import cache_entries
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local.launcher import RUNS_DIR_ENV
from vdk.plugin.ml_training.ops import boards
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.runtime.board_events import BOARD_DIR


class Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def full_run(runs, name: str, events: int = 1):
    board = runs / name / "work" / BOARD_DIR
    board.mkdir(parents=True)
    for i in range(events):
        (board / f"events.out.tfevents.{i}.host").write_bytes(b"event %d" % i)
    return runs / name


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "runs" / "full"
    full_run(folder, "spirals-20260101-100000-aaaaaaaa")
    full_run(folder, "spirals-20260103-100000-bbbbbbbb", events=2)
    full_run(folder, "spirals-long-20260104-100000-cccccccc")  # another job, whose name starts alike
    sweep = folder / "spirals-sweep-20260102-090000"
    sweep.mkdir()
    for number, name in enumerate(["spirals-20260102-090001-dddddddd", "spirals-20260102-090100-eeeeeeee"]):
        (sweep / f"trial-{number}").symlink_to(full_run(folder, name))
    sqlite3.connect(sweep / "study.db").close()
    return folder


def test_this_machines_runs_are_its_full_runs_and_sweeps_newest_first(runs):
    found = boards.local_runs("spirals")
    assert [r.name for r in found] == [
        "spirals-20260103-100000-bbbbbbbb",
        "spirals-sweep-20260102-090000",  # its trials are part of it, not runs of their own
        "spirals-20260101-100000-aaaaaaaa",
    ]
    sweep = found[1]
    assert sorted(sweep.trials) == [0, 1] and sweep.study == runs / sweep.name / "study.db"
    assert sweep.trials[1] == (runs / "spirals-20260102-090100-eeeeeeee" / "work" / BOARD_DIR).resolve()


def test_a_run_is_chosen_by_its_name_or_its_suffix_else_the_newest():
    runs = [boards.BoardRun(n, boards.LOCAL, s) for n, s in (("a-2-xy", "2"), ("a-1-zy", "1"), ("b-0-zz", "0"))]
    assert [r.name for r in boards.choose(runs, (), 2, "a")] == ["a-2-xy", "a-1-zy"]
    assert [r.name for r in boards.choose(runs, ("1-zy", "b-0-zz"), 5, "a")] == ["a-1-zy", "b-0-zz"]
    with pytest.raises(MLTrainingError) as ambiguous:
        boards.choose(runs, ("y",), 5, "a")
    assert "2 runs of a end with 'y'" in ambiguous.value.problem
    with pytest.raises(MLTrainingError) as unknown:
        boards.choose(runs, ("nope",), 5, "a")
    assert "no run of a is named 'nope'" in unknown.value.problem and "a-2-xy" in unknown.value.problem


def test_the_board_holds_a_directory_per_run_and_a_sweeps_trials_below_it(runs, tmp_path):
    scope = Scope(None, "spirals", None, None, None)
    board = boards.collect_board(scope, last=2, to=tmp_path / "board", cluster=False)
    assert board.runs == ["spirals-20260103-100000-bbbbbbbb", "spirals-sweep-20260102-090000"]
    files = sorted(str(p.relative_to(tmp_path / "board")) for p in (tmp_path / "board").rglob("*") if p.is_file())
    assert files == [
        "spirals-20260103-100000-bbbbbbbb/events.out.tfevents.0.host",
        "spirals-20260103-100000-bbbbbbbb/events.out.tfevents.1.host",
        "spirals-sweep-20260102-090000/trial-0/events.out.tfevents.0.host",
        "spirals-sweep-20260102-090000/trial-1/events.out.tfevents.0.host",
    ]


def test_a_job_without_runs_says_how_to_get_some(runs):
    with pytest.raises(MLTrainingError) as error:
        boards.collect_board(Scope(None, "unknown", None, None, None), cluster=False)
    assert "unknown has no runs with TensorBoard event files" in error.value.problem
    assert "vdk run --full" in error.value.fix and "output_pvc" in error.value.fix


def test_runs_whose_event_files_are_off_say_so(runs, tmp_path):
    for events in (runs / "spirals-20260103-100000-bbbbbbbb" / "work" / BOARD_DIR).iterdir():
        os.remove(events)
    notes = Notes()
    with pytest.raises(MLTrainingError) as error:
        boards.collect_board(Scope(None, "spirals", None, None, None), ("bbbbbbbb",), cluster=False, reporter=notes)
    assert "none of the chosen runs of spirals has TensorBoard event files" in error.value.problem
    assert "VDK_ML_TRAINING_TENSORBOARD=0" in error.value.fix
    assert notes.notes == ["note: spirals-20260103-100000-bbbbbbbb (this machine) has no event files"]


def test_the_dashboards_study_is_a_copy_made_by_sqlite(tmp_path):
    study = tmp_path / "study.db"
    with sqlite3.connect(study) as db:
        db.execute("create table trials (number integer, value real)")
        db.execute("insert into trials values (0, 0.5)")
    boards.read_only_copy(study, tmp_path / "copy.db")
    with sqlite3.connect(tmp_path / "copy.db") as db:
        assert db.execute("select number, value from trials").fetchall() == [(0, 0.5)]
    with pytest.raises(MLTrainingError):
        boards.read_only_copy(tmp_path / "gone.db", tmp_path / "copy2.db")


def test_a_viewer_is_installed_by_the_index_rules_of_the_scope_s_job(tmp_path):
    from tests.support.jobs import write_job

    assert boards._index_rules(Scope(None, "spirals", None, None, None)) == {
        "index_strategy": "best-match",
        "job_dir": None,
    }
    job = write_job(tmp_path, "spirals", ml="index_strategy = first-index\n", files={"train.py": "pass\n"})
    assert boards._index_rules(Scope(None, "spirals", job, None, None)) == {
        "index_strategy": "first-index",
        "job_dir": job,
    }
    (job / "config.ini").write_text("[ml-training]\nindex_strategy = fastest\n")  # a config that does not load
    assert boards._index_rules(Scope(None, "spirals", job, None, None))["index_strategy"] == "best-match"


def test_two_boards_of_a_job_at_once_each_keep_their_folder_until_their_command_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    first = boards.board_folder("job", None)
    (first / "run-1").mkdir()
    (first / "run-1" / "events.out.tfevents.1").write_bytes(b"event")  # what the first board's TensorBoard reads
    second = boards.board_folder("job", None)  # another terminal's `vdk board job`, while the first one serves
    assert second != first and second.is_dir()
    assert (first / "run-1" / "events.out.tfevents.1").read_bytes() == b"event"
    cache_entries.release_all()  # both commands ended
    long_ago = 1.0
    os.utime(first / ".vdk-board", (long_ago, long_ago))
    third = boards.board_folder("job", None)
    assert not first.exists() and second.is_dir() and third.is_dir()  # an ended board's folder goes a day later
