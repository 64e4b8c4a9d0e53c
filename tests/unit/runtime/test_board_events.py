"""TensorBoard event files of a run's series (runtime/board_events.py), written by tensorboardX and read back with
TensorBoard's own reader, series by series; a sweep trial's values as hparams; when no file is written."""

from __future__ import annotations

import importlib.util
import io

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from vdk.plugin.ml_training.runtime import board_events
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts


def read(directory) -> EventAccumulator:
    events = EventAccumulator(str(directory))
    events.Reload()
    return events


def test_each_series_is_a_tag_of_its_own_named_apart_from_the_scripts(tmp_path):
    writer = board_events.BoardWriter(str(tmp_path / board_events.BOARD_DIR), RunFacts(run="r"))
    writer.write([Point("loss", 0.9, 1, 1000.0), Point("metrics/val_loss", 0.7, 1, 1000.5)])
    writer.write([Point("loss", 0.4, 8, 1004.0), Point("gpu/sm_activity_percent", 88.0, 8, 1004.0)])
    writer.close(protocol.FINISHED)
    events = read(tmp_path / board_events.BOARD_DIR)
    assert sorted(events.Tags()["scalars"]) == ["vdk/gpu/sm_activity_percent", "vdk/loss", "vdk/metrics/val_loss"]
    assert [(e.step, e.value, e.wall_time) for e in events.Scalars("vdk/loss")] == [
        (1, pytest.approx(0.9), 1000.0),
        (8, pytest.approx(0.4), 1004.0),
    ]
    assert [(e.step, e.value) for e in events.Scalars("vdk/metrics/val_loss")] == [(1, pytest.approx(0.7))]


def test_a_trials_values_are_its_hparams_and_the_sweeps_metric_their_metric(tmp_path):
    facts = RunFacts(params={"lr": 0.01, "optimizer": "adam", "layers": 3}, metric="val_loss")
    writer = board_events.BoardWriter(str(tmp_path), facts)
    writer.write([Point("metrics/val_loss", 0.5, 4, 1.0)])
    writer.close(protocol.FINISHED)
    content = read(tmp_path).PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["lr"].number_value == pytest.approx(0.01)
    assert start.hparams["optimizer"].string_value == "adam" and start.hparams["layers"].number_value == 3
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["vdk/metrics/val_loss"]
    assert "_hparams_/session_end_info" in content  # the trial ended well


def test_a_failed_trial_has_no_end_of_its_session(tmp_path):
    writer = board_events.BoardWriter(str(tmp_path), RunFacts(params={"lr": 0.1}, metric="loss"))
    writer.write([Point("loss", 1.0, 1, 1.0)])
    writer.close(protocol.FAILED)
    content = read(tmp_path).PluginTagToContent("hparams")
    assert "_hparams_/session_end_info" not in content
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["vdk/loss"]  # the step counter's loss


def test_a_run_without_an_output_directory_or_with_them_off_writes_none(tmp_path):
    assert board_events.start(RunFacts(), {}) is None
    assert board_events.start(RunFacts(), {protocol.OUTPUT_DIR: str(tmp_path), protocol.TENSORBOARD: "0"}) is None
    writer = board_events.start(RunFacts(), {protocol.OUTPUT_DIR: str(tmp_path)})
    assert writer is not None and writer.directory == str(tmp_path / board_events.BOARD_DIR)
    assert not (tmp_path / board_events.BOARD_DIR).exists()  # made with the first points


def test_without_tensorboardx_the_run_says_why_it_has_no_event_files(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboardX" else real(name, *a)
    )
    err = io.StringIO()
    assert board_events.start(RunFacts(), {protocol.OUTPUT_DIR: str(tmp_path)}, err) is None
    (line,) = err.getvalue().splitlines()
    assert "no TensorBoard event files" in line and "tensorboardX is not installed" in line
    assert "requirements.txt" in line and protocol.TENSORBOARD in line
