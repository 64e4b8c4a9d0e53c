"""The runtime bootstrap runs the user's entrypoint as `python script.py` / `python -m module` would,
in images (no launcher) and under the local launcher (result file, output routing, no traceback noise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vdk.plugin.ml_training.runtime.report import describe

BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# Prints what a script can observe about how it was started, and pickles a class it defines through a
# spawned worker process, which fails unless the script is the __main__ module as under `python`.
PROBE = """
import json, multiprocessing, os, sys

class Point:
    def __init__(self, x):
        self.x = x

def double(p):
    return Point(p.x * 2)

if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        doubled = pool.map(double, [Point(21)])[0].x
    print(json.dumps({
        "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0],
        "name": __name__, "file": __file__, "doubled": doubled, "main_is_me": sys.modules["__main__"].Point is Point,
    }))
"""


def bootstrap(cwd: Path, *entry: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, *entry],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_describe_keeps_the_users_frames_and_the_exception_chain():
    def user_code():
        try:
            {}["key"]
        except KeyError as e:
            raise RuntimeError("while loading") from e

    with pytest.raises(RuntimeError) as info:
        user_code()
    described = describe(info.value)
    assert described["message"] == "RuntimeError: while loading"
    assert "KeyError: 'key'" in described["traceback"]
    assert "direct cause" in described["traceback"]
