"""The smoke check's device rules against CUDA's own, on a real GPU (skipped without one): every operation of the
device-tracking tests (tests/integration/runtime/test_device_tracking.py: RULES, BUGS, VALID) runs on the real
GPU and under the tracker on virtual GPUs, and both must give the same verdict: both pass, or both fail naming
the same devices (or, for `.numpy()`, with the same message). Those tests compare the tracker with torch's
FakeTensorMode; this compares it with the GPU itself. Operations that name a second GPU (`cuda:1`) are left out:
this machine has one, where CUDA answers `invalid device ordinal` instead.

    .venv/bin/python -m pytest functional_tests/test_gpu_device_rules_real.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from functional_tests.gpu.cases import fixture
from functional_tests.gpu.report import keep_figures

TRACKING = "tests/integration/runtime/test_device_tracking.py"


def _gpu() -> str | None:
    try:
        import torch
    except ImportError as e:
        return f"no torch ({e})"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} finds no GPU"
    return None


WHY_NOT = _gpu()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"needs a GPU: {WHY_NOT}")

HARNESS = """
import json, io, warnings, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
warnings.simplefilter("ignore")
if TRACKED:
    from vdk.plugin.ml_training.runtime import cpu_shims
    cpu_shims.install(gpus=2)
device = "cuda"
results = {}
def case(fn):
    try:
        fn()
        results[fn.__name__] = "ok"
    except Exception as e:
        results[fn.__name__] = f"{type(e).__name__}: {e}"
    return fn
"""


def run(code: str, tracked: bool) -> dict:
    """`code` in a fresh interpreter: on the real GPU, or tracked on virtual GPUs (no real one visible)."""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = "" if tracked else env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    program = textwrap.dedent(HARNESS).replace("TRACKED", str(tracked)) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _devices(verdict: str) -> object:
    found = re.search(r"at least two devices, (\S+) and (\S+)!", verdict)
    return frozenset(found.groups()) if found else verdict.split(":", 1)[0] if verdict != "ok" else "ok"


def _same(real: dict, tracked: dict, leave_out: set[str]) -> dict:
    """The cases whose verdicts differ: {name: (real, tracked)}."""
    return {
        name: (real[name], tracked.get(name))
        for name in real
        if name not in leave_out and _devices(real[name]) != _devices(tracked.get(name, "missing"))
    }


def test_the_tracker_s_rules_are_cuda_s_on_a_real_gpu():
    rules = fixture(TRACKING, "RULES")
    code = f"{rules}\nprint(json.dumps(verdicts(lambda: (torch.ones(4, 4, device='cuda'), torch.ones(4, 4)))))\n"
    real, tracked = run(code, tracked=False), run(code, tracked=True)
    second_gpu = {name for name in real if "cuda:1" in rules.split(f'"{name}"', 1)[1].split("\n", 1)[0]}  # type: ignore[union-attr]
    differ = _same(real, tracked, second_gpu)
    keep_figures("device_rules", rules_compared=len(real) - len(second_gpu), rules_differ=differ)
    assert len(real) - len(second_gpu) >= 20
    assert differ == {}


def test_placement_bugs_fail_on_a_real_gpu_as_the_tracker_says():
    bugs = fixture(TRACKING, "BUGS")
    real = run(f"{bugs}\nprint(json.dumps(results))\n", tracked=False)
    tracked = run(f"{bugs}\nprint(json.dumps(results))\n", tracked=True)
    second_gpu = {"two_gpus", "module_on_other_gpu"}  # cuda:1: one GPU here
    differ = _same(real, tracked, second_gpu | {"gpu_out_of_range"})
    keep_figures("device_rules", bugs_compared=len(real) - len(second_gpu), bugs_differ=differ)
    assert all(verdict != "ok" for verdict in real.values()), real  # each is a bug on the GPU too
    assert "invalid device ordinal" in real["gpu_out_of_range"], real["gpu_out_of_range"]
    assert "invalid device ordinal" in tracked["gpu_out_of_range"], tracked["gpu_out_of_range"]
    assert differ == {}


def test_valid_code_passes_on_a_real_gpu():
    valid = fixture(TRACKING, "VALID")
    real = run(f"import copy\n{valid}\nprint(json.dumps(results))\n", tracked=False)
    failed = {name: verdict for name, verdict in real.items() if verdict != "ok"}
    keep_figures("device_rules", valid_compared=len(real), valid_failed=failed)
    assert len(real) >= 20 and failed == {}
