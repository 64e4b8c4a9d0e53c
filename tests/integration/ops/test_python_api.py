"""The Python API page's example runs as written: a notebook gets the smoke run and the dry run as data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "python-api.md"


@pytest.mark.slow
def test_the_documented_example_runs_a_smoke_check_and_a_dry_run(isolated_environment):
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S).group(1)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\npassed\n" in done.stdout  # after what rank 0 printed (its output goes to stdout, as with vdk run)
    assert "kind: " in done.stdout and "vdk.io/run" in done.stdout  # the run's manifests, as YAML
