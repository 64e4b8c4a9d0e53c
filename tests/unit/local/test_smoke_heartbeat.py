"""A quiet smoke run says how far it got: the line from the ranks' result files, said only after QUIET_SECONDS
without a new step, and again every QUIET_SECONDS while it stays quiet."""

from __future__ import annotations

import json

from vdk.plugin.ml_training.local import smoke_heartbeat
from vdk.plugin.ml_training.local.smoke_heartbeat import Heartbeat
from vdk.plugin.ml_training.local.smoke_heartbeat import quiet_line
from vdk.plugin.ml_training.local.smoke_heartbeat import steps_so_far
from vdk.plugin.ml_training.runtime import protocol


def write_steps(run_dir, rank: int, steps: int | None) -> None:
    record = {"rank": rank, "status": protocol.RUNNING, **({} if steps is None else {"steps": steps})}
    protocol.result_path(run_dir, rank).write_text(json.dumps(record))


def test_the_line_says_each_rank_s_steps_and_when_the_run_is_stopped():
    assert quiet_line(15.4, {}, 2, 600) == (
        "smoke run: 15 s so far, no rank has started its script yet; still running, smoke_timeout stops it in "
        "9m44s (at 10m)"
    )
    assert quiet_line(31, {0: 0, 1: 0}, 2, None) == "smoke run: 31 s so far, no optimizer step yet (2 ranks started)"
    assert quiet_line(47, {0: 1, 1: 0}, 2, 90) == (
        "smoke run: 47 s so far, rank 0: 1 of 2 steps, rank 1: 0 of 2 steps; still running, smoke_timeout stops "
        "it in 43s (at 1m30s)"
    )


def test_steps_come_from_the_result_files_the_ranks_write(tmp_path):
    assert steps_so_far(tmp_path) == {}
    write_steps(tmp_path, 1, 2)
    write_steps(tmp_path, 0, None)  # a rank that has not stepped writes no count yet
    (tmp_path / "rank-2.json").write_text("{not json")  # one being written: skipped
    assert steps_so_far(tmp_path) == {0: 0, 1: 2}


def test_it_speaks_only_after_a_quiet_spell_and_again_after_each(tmp_path, monkeypatch):
    said: list[str] = []
    clock = [100.0]
    monkeypatch.setattr(smoke_heartbeat.time, "monotonic", lambda: clock[0])
    heartbeat = Heartbeat(tmp_path, 2, 600, said.append)
    write_steps(tmp_path, 0, 0)
    heartbeat.tick()  # the rank started: that is news, not quiet
    clock[0] += smoke_heartbeat.QUIET_SECONDS - 1
    heartbeat.tick()
    assert said == []
    clock[0] += 1
    heartbeat.tick()
    assert said == [
        "smoke run: 15 s so far, no optimizer step yet (1 rank started); still running, smoke_timeout stops it in "
        "9m45s (at 10m)"
    ]
    write_steps(tmp_path, 0, 1)
    clock[0] += smoke_heartbeat.QUIET_SECONDS
    heartbeat.tick()  # a new step: quiet starts again
    assert len(said) == 1
    clock[0] += smoke_heartbeat.QUIET_SECONDS
    heartbeat.tick()
    assert (
        said[-1]
        == "smoke run: 45 s so far, rank 0: 1 of 2 steps; still running, smoke_timeout stops it in 9m15s (at 10m)"
    )
