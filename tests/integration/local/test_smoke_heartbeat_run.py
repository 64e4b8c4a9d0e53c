"""A real smoke run that stays quiet before its first step (loading, say) tells how far it got while it waits."""

from __future__ import annotations

import re

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.local import smoke_heartbeat

pytestmark = pytest.mark.slow

SLOW_START = """
import time

import torch

time.sleep(4)  # loading a dataset, say: no step for a while
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
"""


def test_a_quiet_smoke_run_says_how_far_it_got_while_it_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke_heartbeat, "QUIET_SECONDS", 1.0)  # a user waits 15 s for the first line
    # one start: the resume check starts the script again, and its heartbeat counts that start's seconds anew
    ml = {"smoke_steps": "2", "smoke_resume": "off"}
    job = write_job(tmp_path, "slow-start", ml=ml, files={"train.py": SLOW_START})
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    assert result.exit_code == 0, result.output
    quiet = re.findall(
        r"smoke run: (\d+) s so far, (.*); still running, smoke_timeout stops it in \S+ \(at 10m\)\n", result.output
    )
    assert quiet, result.output
    # a loaded machine may take a second between the steps too (or after the last, while the rank is stopped): the
    # line then says the step it reached
    said = re.compile(
        r"no rank has started its script yet|no optimizer step yet \(1 rank started\)|rank 0: [12] of 2 steps"
    )
    assert [where for _, where in quiet if not said.fullmatch(where)] == [], quiet
    assert [int(s) for s, _ in quiet] == sorted(int(s) for s, _ in quiet)
    assert "smoke run PASSED" in result.output and "rank 0: 2 steps" in result.output
