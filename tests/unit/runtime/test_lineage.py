"""The lineage file: a run resumes only from checkpoints it (or the run it continues) wrote and that are whole."""

from __future__ import annotations

import json

from vdk.plugin.ml_training.runtime import lineage
from vdk.plugin.ml_training.runtime.lineage import Lineage


def checkpoint(root, name):
    path = root / name
    path.mkdir(parents=True)
    return str(path)


def test_the_last_checkpoint_is_the_furthest_step_of_this_run_that_is_still_there(tmp_path):
    run = Lineage(str(tmp_path), "mnist-k3x9p2qa")
    for step in (100, 300, 200):
        run.record(checkpoint(tmp_path, f"out/checkpoint-{step}"), lineage.TRANSFORMERS, step)
    run.record(checkpoint(tmp_path, "gone"), lineage.TRANSFORMERS, 400)
    (tmp_path / "gone").rmdir()  # a checkpoint removed since (save_total_limit): not resumed from
    assert run.last(lineage.TRANSFORMERS).path == str(tmp_path / "out/checkpoint-300")
    assert run.last(lineage.LIGHTNING) is None
    # paths inside the working directory are kept relative to it: the directory can move (a copy for --from)
    written = json.loads((tmp_path / lineage.FILE).read_text())
    assert written["checkpoints"][0]["path"] == "out/checkpoint-100"
    assert written["runs"] == {"mnist-k3x9p2qa": {"from": None}}


def test_a_stranger_s_checkpoint_is_never_resumed_from(tmp_path):
    Lineage(str(tmp_path), "other-run").record(checkpoint(tmp_path, "checkpoint-900"), lineage.TRANSFORMERS, 900)
    unlisted = checkpoint(tmp_path, "checkpoint-950")  # in the directory (the job's copy), but in no record
    mine = Lineage(str(tmp_path), "mnist-k3x9p2qa")
    assert mine.last(lineage.TRANSFORMERS) is None
    assert not mine.is_mine(unlisted) and not mine.is_mine(str(tmp_path / "checkpoint-900"))
    mine.record(checkpoint(tmp_path, "checkpoint-10"), lineage.TRANSFORMERS, 10)
    assert mine.last(lineage.TRANSFORMERS).step == 10 and mine.is_mine("checkpoint-10")


def test_a_run_that_continues_another_resumes_from_its_checkpoints_and_those_it_continued(tmp_path):
    Lineage(str(tmp_path), "run-a").record(checkpoint(tmp_path, "a-1"), lineage.ACCELERATE, 1)
    Lineage(str(tmp_path), "run-b", continues="run-a").record(checkpoint(tmp_path, "b-2"), lineage.ACCELERATE, 2)
    run_c = Lineage(str(tmp_path), "run-c", continues="run-b")
    assert run_c.runs() == ["run-c", "run-b", "run-a"]
    assert [c.run for c in run_c.checkpoints(lineage.ACCELERATE)] == ["run-a", "run-b"]
    assert Lineage(str(tmp_path), "run-d").checkpoints(lineage.ACCELERATE) == []  # a new run continues none


def test_where_the_data_stood_and_a_stop_s_checkpoint_are_kept(tmp_path):
    run = Lineage(str(tmp_path), "r")
    run.record(checkpoint(tmp_path, "checkpoints/on-stop-step-7"), lineage.ACCELERATE, 7, True,
               {"loader": 0, "pass": 1, "batches": 3})  # fmt: skip
    found = run.last(lineage.ACCELERATE)
    assert found.on_stop and found.position == {"loader": 0, "pass": 1, "batches": 3} and found.name == "on-stop-step-7"


def test_an_unreadable_file_is_no_lineage_and_a_record_never_raises(tmp_path):
    (tmp_path / lineage.FILE).write_text("{not json")
    run = Lineage(str(tmp_path), "r")
    assert run.last(lineage.TRANSFORMERS) is None
    run.record(checkpoint(tmp_path, "c"), lineage.TRANSFORMERS, 1)  # replaces it
    assert run.last(lineage.TRANSFORMERS).step == 1
    Lineage(str(tmp_path / "missing" / "deeper"), "r").record("/nowhere", lineage.TRANSFORMERS, 1)


def test_a_process_without_a_run_name_has_no_lineage(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VDK_ML_TRAINING_RUN_NAME", raising=False)
    assert Lineage.of_this_process() is None
    monkeypatch.setenv("VDK_ML_TRAINING_RUN_NAME", "mnist-k3x9p2qa")
    monkeypatch.setenv("VDK_ML_TRAINING_RESUME_FROM", "mnist-m7d1c0zz")
    found = Lineage.of_this_process()
    assert (found.run, found.continues, found.directory) == ("mnist-k3x9p2qa", "mnist-m7d1c0zz", str(tmp_path))


def test_each_start_of_a_run_is_counted_beside_its_checkpoints_and_a_restarted_pod_goes_on_counting(tmp_path):
    first = Lineage(str(tmp_path), "mnist-k3x9p2qa")
    assert [first.started(), first.started()] == [1, 2]
    first.record(str(tmp_path / "checkpoint-10"), lineage.TRANSFORMERS, 10)  # a checkpoint keeps the count
    again = Lineage(str(tmp_path), "mnist-k3x9p2qa")  # the pod that replaced it: the same run
    assert again.started() == 3
    other = Lineage(str(tmp_path), "mnist-m7d1c0zz", continues="mnist-k3x9p2qa")  # a run that continues it
    assert other.started() == 1
    runs = json.loads((tmp_path / lineage.FILE).read_text())["runs"]
    assert runs == {
        "mnist-k3x9p2qa": {"from": None, "starts": 3},
        "mnist-m7d1c0zz": {"from": "mnist-k3x9p2qa", "starts": 1},
    }
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / lineage.FILE).mkdir()  # cannot be written: the start is not held back
    assert Lineage(str(tmp_path / "ro"), "mnist-k3x9p2qa").started() == 0
