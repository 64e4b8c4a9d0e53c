"""The idle policy's verdicts, and what an idle-stopped process prints read back as written."""

from __future__ import annotations

import io

from vdk.plugin.ml_training.runtime.idle_policy import IDLE_EXIT_CODE
from vdk.plugin.ml_training.runtime.idle_policy import Idle
from vdk.plugin.ml_training.runtime.idle_policy import IdlePolicy
from vdk.plugin.ml_training.runtime.idle_policy import parse_idle
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE


def policy(seconds: float = 60) -> tuple[IdlePolicy, io.StringIO, list]:
    out, exits = io.StringIO(), []
    return IdlePolicy(seconds, "2", "16", out=out, exit=exits.append), out, exits


def test_it_fires_only_after_the_first_step_and_only_when_idle_without_a_break():
    made, out, exits = policy(60)
    assert made.observe(0, True, trained=False, steps=0) is None  # start-up: not counted
    assert made.observe(100, True, trained=False, steps=0) is None
    assert made.observe(110, True, trained=True, steps=5) is None  # idle from here
    assert made.observe(160, False, trained=True, steps=5) is None  # a busy sample: it starts again
    assert made.observe(170, True, trained=True, steps=6) is None
    assert made.observe(229, True, trained=True, steps=6) is None and not exits
    fired = made.observe(230, True, trained=True, steps=6)
    assert exits == [IDLE_EXIT_CODE] != [STALL_EXIT_CODE]
    assert (fired.node, fired.seconds, fired.last_step, fired.rank) == ("2", 60, 6, "16")
    assert out.getvalue().startswith(
        "[vdk-ml-training] idle: every GPU of node 2 below 5% SM activity for 1m (last step 6); "
        "stopped by idle_timeout\n"
        "[vdk-ml-training] stack rank=16 thread=MainThread (most recent call first)\n"
    )


def test_what_it_prints_is_read_back_with_the_stacks():
    idle = Idle("1", 7200, 5.0, 1234, "8", (("MainThread", ('  File "/opt/vdk-ml/job/train.py", line 42, in train',
                                                            "    batch = next(batches)")),))  # fmt: skip
    lines = ["noise", *idle.lines(), "[vdk-ml-training] stack rank=3 thread=MainThread (most recent call first)"]
    read = parse_idle(lines)
    assert read == idle
    assert read.describe() == "every GPU of node 1 below 5% SM activity for 2h (last step 1234)"
    assert read.as_stall().top_frames() == [
        '  File "/opt/vdk-ml/job/train.py", line 42, in train',
        "    batch = next(batches)",
    ]
    assert read.to_dict()["duration"] == "2h"
    assert parse_idle(["[vdk-ml-training] stalled: no optimizer step for 30m on rank 5 (last step 1)"]) is None
