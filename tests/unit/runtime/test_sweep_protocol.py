"""What a sweep's parts tell each other: a trial's metric settings, the same for a trial pod and a local sweep."""

from __future__ import annotations

import json

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import sweep_protocol as wire


def test_a_trial_is_told_its_metric_its_values_as_json_and_the_job_s_progress_period():
    told = wire.metric_environment({protocol.PROGRESS_SECONDS: "5"}, "eval_loss", "/tmp/m", {"lr": 0.1, "bs": 8})
    assert told[wire.METRIC] == "eval_loss" and told[wire.METRIC_FILE] == "/tmp/m"
    assert json.loads(told[wire.TRIAL_PARAMS]) == {"bs": 8, "lr": 0.1} and told[wire.METRIC_SECONDS] == "5"
    no_lines = wire.metric_environment({protocol.PROGRESS_SECONDS: "0"}, "loss", "/tmp/m", {})
    assert no_lines[wire.METRIC_SECONDS] == str(wire.DEFAULT_METRIC_SECONDS)  # 0 turns progress lines off, not this
    own = wire.metric_environment({wire.METRIC_SECONDS: "1"}, "loss", "/tmp/m", {})
    assert wire.METRIC_SECONDS not in own  # the job's own setting stays


def test_why_a_sweep_stopped_is_one_line():
    assert wire.stop_line("the first 3 trials failed") == "[vdk-ml-training] sweep stopped: the first 3 trials failed"
