"""Runtime code patches torch for the whole process: each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest


@pytest.fixture
def run_python():
    """`run_python(code)`: run `code` in a new interpreter without GPUs; it prints one JSON object last,
    which is returned."""

    def run(code: str, timeout: int = 180) -> dict:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run
