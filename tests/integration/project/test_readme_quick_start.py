"""README's quick start is a job a person can copy and run: its train.py and config.ini, written as they stand,
pass the smoke run of the real `vdk run` and render with `vdk deploy --dry-run`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VDK = Path(sys.executable).parent / "vdk"


def quick_start_job(parent: Path) -> Path:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quick start") : text.index("## Documentation")]
    job = parent / "my-job"
    job.mkdir()
    (job / "train.py").write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    (job / "config.ini").write_text(re.search(r"```ini\n(.*?)```", section, re.S).group(1))
    return job


def vdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env["KUBECONFIG"] = str(cwd / "no-kubeconfig")
    return subprocess.run([str(VDK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_readme_s_own_job_passes_the_smoke_run_and_renders(tmp_path):
    job = quick_start_job(tmp_path)
    ran = vdk("run", job.name, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "smoke run PASSED" in ran.stderr + ran.stdout
    assert "2 processes on 2 virtual GPUs" in ran.stderr + ran.stdout  # nodes = 2 x gpus_per_node = 8, smoke: 2
    rendered = vdk("deploy", "-p", str(job), "--dry-run", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith("apiVersion: ")
