"""The termination message: the first process's message wins; postscripts (a node's GPU totals) go after it,
whoever writes first, and never push the message out of the kubelet's 4 KiB."""

from __future__ import annotations

from vdk.plugin.ml_training.runtime import termination

GPU = "[vdk-ml-training] gpu node=0 gpus=1 source=gpm final=1"


def test_nothing_happens_without_the_file(tmp_path):
    assert not termination.leave("x", str(tmp_path / "absent"))
    assert not termination.add(GPU, str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()


def test_the_first_message_wins_and_a_postscript_follows_it(tmp_path):
    path = tmp_path / "termination-log"
    path.write_text("")
    assert termination.leave("[vdk-ml-training] progress step=3 script=finished", str(path))
    assert termination.add(GPU, str(path))
    assert not termination.leave("[vdk-ml-training] stalled: no optimizer step for 30m on rank 1", str(path))
    assert path.read_text().splitlines() == ["[vdk-ml-training] progress step=3 script=finished", GPU]


def test_a_message_left_after_a_postscript_goes_before_it(tmp_path):
    path = tmp_path / "termination-log"
    path.write_text("")
    assert termination.add(GPU, str(path))  # local rank 0 ended first
    assert termination.leave("[vdk-ml-training] stalled: no optimizer step for 30m on rank 1", str(path))
    assert path.read_text().splitlines() == ["[vdk-ml-training] stalled: no optimizer step for 30m on rank 1", GPU]


def test_a_postscript_that_does_not_fit_is_left_out(tmp_path):
    path = tmp_path / "termination-log"
    path.write_text("")
    termination.leave("x" * (termination.MAX_BYTES - 20), str(path))
    assert not termination.add(GPU, str(path))
    assert len(path.read_bytes()) <= termination.MAX_BYTES and GPU not in path.read_text()


def test_the_path_may_come_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "elsewhere"
    path.write_text("")
    monkeypatch.setenv(termination.PATH_VARIABLE, str(path))
    assert termination.add(GPU)
    assert path.read_text() == GPU + "\n"
