"""The data tools' wire between processes: the tools write progress lines on stderr and their JSON answer on
stdout; the plugin reads both at once. Every progress line reaches the caller, in order, however fast they come
(a reader of stderr beside `communicate()` lost some to it: a full run's fetched bytes fell short of the total),
and the other stderr lines make the message when the tools fail."""

from __future__ import annotations

import sys

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops import data_tools

LINES = 3000
TOOLS = f"""
import json, sys
for n in range(1, {LINES} + 1):
    print(json.dumps({{"progress": {{"target": "data/train", "files": n, "bytes": n * 10}}}}), file=sys.stderr)
    if n % 500 == 0:
        print("a warning of boto3", file=sys.stderr, flush=True)
print(json.dumps([{{"target": "data/train", "path": "/cache/x"}}]))
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def tools(monkeypatch):
    def command(schemes, arguments, index_strategy, job_dir):
        return [sys.executable, "-c", TOOLS, *arguments]

    monkeypatch.setattr(data_tools, "command", command)


def test_every_progress_line_reaches_the_caller_in_order_beside_the_answer(tools):
    told: list[dict] = []
    answer = data_tools.run({"s3"}, ["0"], {}, timeout=120, progress=told.append)
    assert answer == [{"target": "data/train", "path": "/cache/x"}]
    assert [line["files"] for line in told] == list(range(1, LINES + 1))
    assert told[-1]["bytes"] == LINES * 10


def test_a_failure_says_the_tools_own_lines_not_the_progress(tools):
    with pytest.raises(MLTrainingError) as info:
        data_tools.run({"s3"}, ["2"], {}, timeout=120, progress=lambda line: None)
    assert "exit status 2" in info.value.problem and "a warning of boto3" in info.value.problem
    assert '"progress"' not in info.value.problem
