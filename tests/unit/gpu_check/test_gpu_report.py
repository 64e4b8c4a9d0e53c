"""The check's report (functional_tests/gpu/report.py): each part's status and time, a part's crash recorded as
its failure and never the end of the check, the JSON and the text table rewritten after every part, and the
functional tests' figures handed over through a file."""

from __future__ import annotations

import json

import pytest
from functional_tests.gpu import agreement
from functional_tests.gpu import report as report_module
from functional_tests.gpu.report import PartFailed
from functional_tests.gpu.report import Report
from functional_tests.gpu.report import Skip


def test_each_part_is_recorded_with_its_status_and_the_report_is_on_disk_after_it(tmp_path):
    report = Report(tmp_path, dry_run=True, budget_seconds=300)
    with report.part("environment", 30) as entry:
        entry["detail"] = "NVIDIA H200"
    assert json.loads((tmp_path / "gpu-report.json").read_text())["parts"][0]["status"] == "passed"
    with report.part("functional tests", 100):
        raise Skip("needs a GPU")
    with report.part("full runs", 100):
        raise PartFailed("1 of 3 passed")
    with report.part("agreement"):
        raise KeyError("a bug of the check")
    with report.part("late"):
        raise TimeoutError("pytest ran out of its time")
    parts = json.loads((tmp_path / "gpu-report.json").read_text())["parts"]
    assert [(p["name"], p["status"]) for p in parts] == [
        ("environment", "passed"),
        ("functional tests", "skipped"),
        ("full runs", "failed"),
        ("agreement", "failed"),
        ("late", "out of time"),
    ]
    assert parts[3]["detail"] == "KeyError: 'a bug of the check'" and "Traceback" in parts[3]["traceback"]
    assert all(isinstance(p["seconds"], float) for p in parts)
    text = (tmp_path / "gpu-report.txt").read_text()
    assert "DRY RUN" in text and "of 300 s" in text
    assert [line.split()[0] for line in text.splitlines() if line.startswith("  ") and "  " in line.strip()][:6] == [
        "PART",
        "environment",
        "functional",
        "full",
        "agreement",
        "late",
    ]


def test_the_text_table_shows_the_sampler_the_full_runs_and_every_difference_with_its_cause(tmp_path):
    report = Report(tmp_path)
    report["environment"] = {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0"}
    report["sampler"] = {
        "source": "gpm",
        "pairs": 31,
        "memory_max_error": 64 * 1048576,
        "activity_max_error": 4.5,
        "activity_against": "dmon GPM SM activity",
        "busy_sampler": 91.0,
        "busy_smi": 100.0,
        "within_tolerance": True,
        "tolerance": "memory within 512 MiB",
    }
    report["full_runs"] = [
        {"example": "ddp-nccl", "passed": True, "seconds": 9.5, "steps": 96, "last_loss": 0.5, "steps_per_s": 80.0},
        {"example": "hf-trainer", "passed": False, "error": "exit 1"},
    ]
    smoke, gpu = agreement.Verdict(False, where="train.py:9", limit="CUDA graphs"), agreement.Verdict(True)
    rows = [
        {"case": "gap-cuda-graph", "smoke": smoke.to_dict(), "gpu": gpu.to_dict()},
        {"case": "save-fixed", "smoke": agreement.Verdict(True).to_dict(), "gpu": gpu.to_dict()},
    ]
    rows[0]["agreement"] = agreement.compare(smoke, gpu).to_dict()
    rows[1]["agreement"] = agreement.compare(agreement.Verdict(True), gpu).to_dict()
    report["agreement"] = rows
    report["agreement_tally"] = agreement.tally([agreement.compare(smoke, gpu)])
    text = (tmp_path / "gpu-report.txt").read_text()
    assert "GPU NVIDIA H200, driver 580.159.04, CUDA 13.0, torch 2.11.0" in text
    assert "memory error max 64 MiB; SM activity error max 4.5 points (dmon GPM SM activity)" in text
    assert "within tolerance" in text
    assert any(line.split()[:4] == ["ddp-nccl", "PASSED", "9.5", "96"] for line in text.splitlines())
    assert any(line.split()[:2] == ["hf-trainer", "FAILED"] for line in text.splitlines())
    assert any(
        line.split() == ["gap-cuda-graph", "fail", "at", "train.py:9", "pass", "disagree"] for line in text.splitlines()
    )
    assert "gap-cuda-graph: smoke fail at train.py:9, GPU passes: the smoke check names it a limit of itself" in text
    assert "save-fixed:" not in text.split("differences and their causes:")[1]  # an agreement is no difference


def test_the_functional_tests_figures_reach_the_check_through_the_file_it_names(tmp_path, monkeypatch):
    monkeypatch.delenv("VDK_ML_TRAINING_GPU_CHECK_FIGURES", raising=False)
    report_module.keep_figures("sampler", pairs=3)  # a plain pytest run: nothing kept, nothing fails
    figures = tmp_path / "figures.jsonl"
    monkeypatch.setenv("VDK_ML_TRAINING_GPU_CHECK_FIGURES", str(figures))
    report_module.keep_figures("sampler", pairs=3)
    report_module.keep_figures("idle_policy", seconds=12.5)
    assert [json.loads(line) for line in figures.read_text().splitlines()] == [
        {"part": "sampler", "pairs": 3},
        {"part": "idle_policy", "seconds": 12.5},
    ]


@pytest.mark.parametrize("width", [10, 50])
def test_a_table_s_columns_line_up(width):
    lines = report_module.table(["A", "B"], [["x" * width, 1], ["y", None]])
    assert len({line.index(line.split()[1]) for line in lines}) == 1
    assert lines[2].split() == ["y", "-"]
