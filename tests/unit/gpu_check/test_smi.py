"""The sampler's readings beside nvidia-smi's (functional_tests/gpu/smi.py): nvidia-smi's output read as it prints
it, each sampler reading paired with the nearest, the phases' edges left out, and the stated tolerance applied."""

from __future__ import annotations

import time

from functional_tests.gpu import smi
from functional_tests.gpu.smi import MIB
from functional_tests.gpu.smi import SamplerReading
from functional_tests.gpu.smi import SmiReading

T0 = time.mktime(time.strptime("2026/11/04 12:00:00", "%Y/%m/%d %H:%M:%S"))


def test_a_query_line_is_read_with_its_own_timestamp():
    found = smi.parse_query_line("2026/11/04 12:00:01.250, 97, 40312, 143771")
    assert found == SmiReading(T0 + 1.25, util=97.0, memory=40312 * MIB)
    assert smi.parse_query_line("2026/11/04 12:00:01.250, [N/A], 40312, 143771").util is None
    assert smi.parse_query_line("timestamp, utilization.gpu [%]") is None
    assert smi.parse_query_line("") is None


def test_dmon_s_gpm_sm_activity_is_found_by_its_column_s_name():
    lines = [
        "#Date       Time        gpu     sm    mem    enc    dec    jpg    ofa  smAct",
        "#YYYYMMDD   HH:MM:SS    Idx      %      %      %      %      %      %      %",
        " 20261104   12:00:02      0     99     40      0      0      0      0   93.5",
        " 20261104   12:00:03      0     98     41      0      0      0      0      -",
        "garbage",
    ]
    assert smi.parse_dmon(lines) == [SmiReading(T0 + 2, sm_activity=93.5)]
    assert smi.parse_dmon(["#Date Time gpu sm", " 20261104 12:00:02 0 99"]) == []  # no GPM column: nothing


def _load(sampler_sm, smi_util, memory=8 * 1024 * MIB, smi_memory=None, gpm=None):
    """A reading every 0.5 s for 20 s: idle the first 10 s, busy the next 10 s."""
    sampler, query, dmon = [], [], []
    for i in range(40):
        at = T0 + i * 0.5
        busy = i >= 20
        sampler.append(SamplerReading(at + 0.05, sampler_sm(busy), memory))
        query.append(SmiReading(at, util=smi_util(busy), memory=smi_memory if smi_memory is not None else memory))
        if gpm is not None and i % 2 == 0:
            dmon.append(SmiReading(at, sm_activity=gpm(busy)))
    return sampler, query, dmon, (T0, T0 + 10), (T0 + 10, T0 + 20)


def test_readings_that_agree_are_within_tolerance_and_the_phases_are_told_apart():
    sampler, query, _, idle, busy = _load(lambda b: 97.0 if b else 0.0, lambda b: 99.0 if b else 0.0)
    found = smi.compare("util", sampler, query, busy=busy, idle=idle)
    assert found.within_tolerance, found.problems
    assert found.activity_max_error == 2.0 and found.memory_max_error == 0
    assert found.busy_sampler == 97.0 and found.busy_smi == 99.0 and found.idle_sampler == 0.0
    # the readings within EDGE_SECONDS of a phase's start or end are left out
    assert found.pairs == len([r for r in sampler if all(abs(r.at - e) > smi.EDGE_SECONDS for e in (*idle, *busy))])
    assert found.to_dict()["tolerance"] == smi.tolerance_text()


def test_memory_or_activity_beyond_the_tolerance_is_a_problem_said_with_its_size():
    sampler, query, _, idle, busy = _load(
        lambda b: 60.0 if b else 0.0, lambda b: 99.0 if b else 0.0, smi_memory=8 * 1024 * MIB + 600 * MIB
    )
    found = smi.compare("util", sampler, query, busy=busy, idle=idle)
    assert not found.within_tolerance
    assert "memory differs by up to 600 MiB" in found.problems
    assert "SM activity differs from utilization.gpu by up to 39.0 points" in found.problems


def test_gpm_activity_is_compared_with_dmon_and_never_above_the_duty_cycle():
    sampler, query, dmon, idle, busy = _load(
        lambda b: 70.0 if b else 0.0, lambda b: 100.0 if b else 0.0, gpm=lambda b: 72.0 if b else 0.0
    )
    found = smi.compare("gpm", sampler, query, dmon, busy=busy, idle=idle)
    assert found.within_tolerance and found.activity_against == "dmon GPM SM activity"
    assert found.activity_max_error == 2.0 and found.above_util == 0.0
    above, duty, _, _, _ = _load(lambda b: 95.0 if b else 0.0, lambda b: 60.0 if b else 0.0)
    beyond = smi.compare("gpm", above, duty, busy=busy, idle=idle)
    assert "GPM SM activity up to 35.0 points above utilization.gpu" in beyond.problems
    assert beyond.activity_against == "nothing: dmon gave no GPM SM activity"


def test_readings_too_far_apart_in_time_are_not_paired():
    sampler = [SamplerReading(T0 + 100, 50.0, 0)]
    found = smi.compare("util", sampler, [SmiReading(T0, util=50.0, memory=0)])
    assert found.pairs == 0 and "no sampler reading had an nvidia-smi reading within its pairing window" in (
        found.problems
    )
