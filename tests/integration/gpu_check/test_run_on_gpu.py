"""The real-GPU check's preparation and its orchestration, on this machine without a GPU: `make gpu-check-prepare`'s
module builds the carried files (the project's wheel and what the GPU machine lacks, for Python 3.12), they fit
with the working tree in what one call takes, and the exact call is printed; then run-on-gpu.sh, dry, with those
wheels installed offline into a venv over this environment (a venv itself, as the GPU machine's python3 is), gives
a well-formed report: every part, the GPU ones skipped with the reason, and two rows of the agreement table (the
import check failing, a CPU job passing) whose GPU side runs on the CPU as their jobs ask for no GPU.

The downloaded dependencies are cached between test sessions with the suite's other builds (keyed, as the
preparation keys them, by the requirements, the machine's list of packages and the constraints)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from functional_tests.gpu import prepare
from packaging.tags import compatible_tags
from packaging.tags import cpython_tags
from packaging.utils import parse_wheel_filename

from tests.support.debian_base import cache_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "functional_tests" / "gpu" / "run-on-gpu.sh"


@pytest.fixture(scope="module")
def carried() -> tuple[Path, str]:
    into = cache_dir() / "gpu-carry"
    done = subprocess.run(
        [sys.executable, "-m", "functional_tests.gpu.prepare", "--into", str(into)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return into, done.stdout


def _installs_on_python_312(wheel: str) -> bool:
    """Whether pip on CPython 3.12 takes this wheel, by packaging's own tag rules (cp311-abi3 does, cp311-cp311 not)."""
    tags = parse_wheel_filename(wheel)[3]
    return any(
        tag
        in set(cpython_tags((3, 12), platforms=[tag.platform]))
        | set(compatible_tags((3, 12), platforms=[tag.platform]))
        for tag in tags
    )


def test_the_preparation_carries_the_project_and_what_the_machine_lacks_within_the_limit(carried):
    into, said = carried
    wheels = sorted(p.name for p in (into / "wheels").glob("*.whl"))
    names = {prepare.normalize(w.split("-", 1)[0]) for w in wheels}
    assert {"vdk-ml-training", "vdk-core", "kubernetes", "optuna", "uv", "setuptools"} <= names
    assert not names & {"torch", "transformers", "accelerate", "lightning", "nvidia-ml-py", "numpy"}  # the machine's
    assert [w for w in wheels if not _installs_on_python_312(w)] == []  # abi3 wheels of older CPythons do too
    total = sum((into / "wheels" / w).stat().st_size for w in wheels) + prepare.tree_bytes()
    assert total <= prepare.LIMIT
    together = re.search(r"together ([\d.]+) MiB of 64 MiB", said)
    assert together and abs(float(together.group(1)) - total / 2**20) < 0.2, said
    assert prepare.call(into) in said  # the exact call, as it is typed


def test_a_dry_run_of_the_check_writes_a_well_formed_report(carried, tmp_path):
    into, _ = carried
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env.update(
        OUT=str(out),
        VDK_GPU_CARRY=str(into),
        VDK_GPU_PYTHON=sys.executable,
        VDK_GPU_VENV=str(tmp_path / "venv"),
        VDK_GPU_CHECK_SECONDS="400",
    )
    command = ["bash", str(SCRIPT), "--dry-run", "--cases", "undeclared-import,no-gpu-job-portable"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr + (out / "setup.log").read_text()
    report = json.loads((out / "gpu-report.json").read_text())
    assert report["dry_run"] is True and report["environment"]["version vdk-ml-training"] == "0.1.0"
    parts = {p["name"]: p for p in report["parts"]}
    assert list(parts) == ["environment", "functional tests", "full runs", "agreement"]
    assert parts["environment"]["status"] == "passed" and parts["agreement"]["status"] == "passed"
    assert parts["full runs"]["status"] == "skipped" and "needs a GPU" in parts["full runs"]["detail"]
    # the real-GPU tests ran, and skipped themselves: this machine has no GPU
    tests = parts["functional tests"]["tests"]
    assert parts["functional tests"]["status"] == "skipped" and len(tests) >= 6
    assert {t["outcome"] for t in tests} == {"skipped"} and all("needs a GPU" in t["message"] for t in tests)
    rows = {r["case"]: r for r in report["agreement"]}
    assert rows["undeclared-import"]["smoke"]["where"] == "train.py:3"  # the import check, before anything ran
    assert rows["undeclared-import"]["gpu"]["where"] == "train.py:3"  # the module the image lacks, hidden
    assert rows["undeclared-import"]["agreement"]["outcome"] == "agree"
    assert rows["no-gpu-job-portable"]["smoke"]["passed"] and rows["no-gpu-job-portable"]["gpu"]["passed"]
    assert report["agreement_tally"] == {
        "agree": 2,
        "agree (verdict only)": 0,
        "disagree": 0,
        "not compared": 0,
        "unexplained": 0,
    }
    text = (out / "gpu-report.txt").read_text()
    assert "DRY RUN" in text and "undeclared-import" in text and "agree: 2" in text
    assert {"gpu-report.json", "gpu-report.txt", "setup.log", "check.log"} <= {p.name for p in out.iterdir()}
