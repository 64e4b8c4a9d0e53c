"""A run that continues another begins with its outputs: RUN's directory is copied into the new run's once, by the
ranks that start at once (each finds it whole), files as copies, links as links, and never again after a restart."""

from __future__ import annotations

import os
import threading

import pytest

from vdk.plugin.ml_training.runtime import earlier_outputs


@pytest.fixture
def earlier(tmp_path):
    """RUN's directory: a checkpoint, its lineage file, a link to its job's code, an empty directory."""
    run = tmp_path / "mnist-k3x9p2qa"
    (run / "outputs" / "checkpoint-1200").mkdir(parents=True)
    (run / "outputs" / "checkpoint-1200" / "model.safetensors").write_bytes(b"w" * 1000)
    (run / "vdk-checkpoints.json").write_text('{"format": 1}')
    (run / "logs").mkdir()
    os.symlink("/opt/vdk-ml/job/train.py", run / "train.py")
    return run


def test_the_new_run_s_directory_begins_with_everything_the_earlier_one_holds(earlier, tmp_path):
    target = tmp_path / "mnist-m7d1c0zz"
    assert earlier_outputs.begin_with(str(earlier), str(target)) is True
    copied = target / "outputs" / "checkpoint-1200" / "model.safetensors"
    assert copied.read_bytes() == b"w" * 1000
    # a copy, not a link: the new run saving its snapshot again leaves the earlier run's as it was
    copied.write_bytes(b"new")
    assert (earlier / "outputs" / "checkpoint-1200" / "model.safetensors").read_bytes() == b"w" * 1000
    assert (target / "vdk-checkpoints.json").read_text() == '{"format": 1}'
    assert os.readlink(target / "train.py") == "/opt/vdk-ml/job/train.py" and (target / "logs").is_dir()
    # a restarted pod of the new run: what it wrote since stays, nothing is copied again
    (target / "vdk-checkpoints.json").unlink()
    (target / "vdk-checkpoints.json").write_text('{"format": 1, "runs": {}}')
    assert earlier_outputs.begin_with(str(earlier), str(target)) is False
    assert (target / "vdk-checkpoints.json").read_text() == '{"format": 1, "runs": {}}'


def test_ranks_that_start_at_once_each_find_the_whole_directory_and_a_copy_appears_whole(earlier, tmp_path):
    target = tmp_path / "mnist-m7d1c0zz"
    seen = []

    def rank():
        earlier_outputs.begin_with(str(earlier), str(target))
        seen.append((target / "outputs" / "checkpoint-1200" / "model.safetensors").read_bytes() == b"w" * 1000)

    threads = [threading.Thread(target=rank) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen == [True] * 4 and (target / earlier_outputs.DONE).exists()
    assert not [p for p in target.rglob("*.partial")]


def test_the_outputs_of_a_run_that_are_gone_leave_the_new_run_empty_saying_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VDK_ML_TRAINING_RESUME_FROM", "mnist-k3x9p2qa")
    (tmp_path / "gone").mkdir()  # the kubelet makes a subPath that is not there: empty
    assert earlier_outputs.begin_with(str(tmp_path / "gone"), str(tmp_path / "new")) is True
    said = capsys.readouterr().err
    assert "(the outputs of mnist-k3x9p2qa) is empty: this run begins without them" in said
    assert os.listdir(tmp_path / "new") == [earlier_outputs.DONE]
