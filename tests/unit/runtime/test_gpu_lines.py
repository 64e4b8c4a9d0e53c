"""GPU lines: what a node's sampler prints is read back as written; the running tally keeps the training window
(first to last optimizer step) apart from the start-up and what follows the last step."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import SPARK_WIDTH
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.gpu_lines import Tally
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_line
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines

FIGURES = GpuFigures(
    node="1", gpus=8, model="NVIDIA H100 80GB HBM3", source="gpm", seconds=3600, sm_now=88.0, sm_mean=71.4,
    sm_p95=93.0, occupancy_mean=41.0, sm_gpus=(71.4, None), mem_peak=31 * GIB, mem_total=80 * GIB, power_w=512.0,
    busy_gpu_s=20563.0, sampled_gpu_s=28800.0, window_gpu_s=27000.0, idle_gpu_s=1200.0, started=1_700_000_000.0,
    first_step=1_700_000_090.0, last_step=1_700_003_500.0, steps=1234, cpu_cores=3.9, cpu_limit=4.0,
    spark="0789998-9", profiles=(("1g.10gb", 1, 9856 << 20), ("7g.80gb", 7, 80896 << 20)), final=True,
)  # fmt: skip


def test_a_line_is_read_back_as_written_after_a_log_prefix():
    line = FIGURES.line()
    assert line.startswith("[vdk-ml-training] gpu node=1 gpus=8 model=NVIDIA_H100_80GB_HBM3 source=gpm ")
    assert " " not in line.split("model=")[1].split()[0]
    read = parse_gpu_line(f"2026-03-01T09:00:00Z stdout F {line}")
    assert read == FIGURES


def test_derived_figures():
    assert FIGURES.mem_share == pytest.approx(31 / 80)
    assert FIGURES.idle_share == pytest.approx(1200 / 27000)
    assert FIGURES.utilisation == pytest.approx(20563 / 28800)
    assert FIGURES.startup_seconds == 90.0
    data = FIGURES.to_dict()
    assert data["source_meaning"].startswith("SM activity (GPM SM_UTIL")
    assert data["profiles"][0] == {"profile": "1g.10gb", "slices": 1, "memory_bytes": 9856 << 20}
    assert GpuFigures(source="none", sampled_gpu_s=10, busy_gpu_s=0).utilisation is None


def test_the_last_line_of_each_node_is_kept_and_other_lines_are_not_read():
    lines = [
        "[vdk-ml-training] progress step=1 loss=0.5",
        GpuFigures(node="0", sm_mean=10.0).line(),
        "[vdk-ml-training] gpus are nice",  # not a GPU line
        GpuFigures(node="1", sm_mean=20.0).line(),
        GpuFigures(node="0", sm_mean=30.0, final=True).line(),
        "[vdk-ml-training] gpu node=2 gpus=many",  # damaged: not read
    ]
    found = parse_gpu_lines(lines)
    assert sorted(found) == ["0", "1"]
    assert (found["0"].sm_mean, found["0"].final, found["1"].sm_mean) == (30.0, True, 20.0)


def add(tally: Tally, sm: float | None, trained: bool, stepped: bool, at: float, seconds: float = 1.0) -> None:
    tally.add(seconds, [sm, sm], [None, None], [GIB, 2 * GIB], [100.0, None], trained, stepped, at)


def test_the_training_window_leaves_out_the_start_up_and_what_follows_the_last_step():
    tally = Tally(idle_percent=5.0)
    add(tally, 0.0, False, False, 0)  # start-up: no step yet
    add(tally, 0.0, False, False, 1)
    add(tally, 50.0, True, True, 2)  # the first step
    add(tally, 2.0, True, True, 3)  # idle, but a step followed: training time
    add(tally, 50.0, True, True, 4)  # the last step
    add(tally, 0.0, True, False, 5)  # after the last step: left out when the totals are taken
    add(tally, 0.0, True, False, 6)
    assert tally.window_gpu_s == 2 * 3 - 2  # samples 2 and 3 folded in at 3 and 4; sample 4 waits for a step
    assert tally.idle_gpu_s == 2  # sample 3, on both GPUs
    assert tally.sampled_gpu_s == 14 and tally.busy_gpu_s == pytest.approx(2 * (0.5 + 0.02 + 0.5))
    assert tally.mem_peak == 2 * GIB and tally.power_sum / tally.power_samples == 100.0
    assert tally.percentile(0.95) == 50.0 and tally.percentile(0.5) == 0.0


def test_unreadable_activity_counts_memory_only():
    tally = Tally()
    add(tally, None, True, True, 0)
    assert tally.sm_samples == 0 and tally.percentile(0.95) is None and tally.mem_peak == 2 * GIB
    assert tally.spark() == ""


def test_the_sparkline_keeps_its_width_over_a_long_run():
    tally = Tally()
    for second in range(10_000):
        add(tally, 100.0 if second < 5000 else 0.0, False, False, second)
    spark = tally.spark()
    assert len(spark) <= SPARK_WIDTH and spark[0] == "9" and spark[-1] == "0"
    assert tally.bucket_seconds >= 10_000 / SPARK_WIDTH
