"""The dependency overlay of local runs: requirements.txt installed by the real uv for this interpreter, on the
ranks' path ahead of site-packages, cached by its hash; vdk's own environment never changes. The requirement
here would break vdk's environment (kubernetes needs a newer python-dateutil) if it were installed there."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.jobs import write_job
from tests.support.vdk_cli import smoke_run
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow

OLD = "2.1"  # a python-dateutil older than what vdk's Kubernetes client needs
SCRIPT = """
import dateutil
import torch

print(f"dateutil {dateutil.__version__} from {dateutil.__file__}", flush=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
"""


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """An old python-dateutil (its `dateutil` module says its version), in a directory of wheels."""
    d = tmp_path_factory.mktemp("wheelhouse")
    module = {"dateutil/__init__.py": f"__version__ = {OLD!r}\n".encode()}
    make_wheel(d, "python-dateutil", OLD, files=module)
    return d


def vdk_run(job: Path, cache: Path, *options: str) -> subprocess.CompletedProcess:
    """`vdk run [OPTIONS] JOB` as a user runs it, its dependency overlays cached in `cache`."""
    return smoke_run(job, *options, timeout=400, env={"VDK_ML_TRAINING_CACHE_DIR": str(cache)})


def dateutil_job(tmp_path: Path, wheelhouse: Path, ml: str = "") -> Path:
    requirements = f"--no-index\n--find-links {wheelhouse}\npython-dateutil=={OLD}\n"
    return write_job(tmp_path, "dateutil", ml=ml, files={"train.py": SCRIPT, "requirements.txt": requirements})


def test_a_requirement_that_conflicts_with_vdk_s_own_goes_into_the_overlay_and_vdk_stays_as_it_was(
    tmp_path, wheelhouse
):
    needed = next(r for r in map(Requirement, importlib.metadata.requires("kubernetes")) if r.name == "python-dateutil")
    assert OLD not in needed.specifier  # installed where vdk runs, it would break vdk's Kubernetes client
    before = importlib.metadata.version("python-dateutil")
    job, cache = dateutil_job(tmp_path, wheelhouse), tmp_path / "cache"

    done = vdk_run(job, cache)
    out = done.stdout
    assert done.returncode == 0, out
    assert "into the run's dependency overlay" in out and "vdk's environment stays as it is" in out
    shown = re.search(r"dateutil (\S+) from (\S+)", out)
    assert shown.group(1) == OLD, out  # the ranks import the overlay's, ahead of site-packages
    overlay = Path(shown.group(2)).parents[1]
    assert overlay.parent.parent == cache / "overlays" and overlay.name == "packages"
    assert "1 package in the run's overlay (installed in" in out
    # uv's steps as they come (progress on the wait), none of its per-package chatter
    assert re.search(r"dependency overlay: resolved \d+ packages? in", out), out
    assert "dependency overlay: installed 1 package in" in out, out
    assert "Using CPython" not in out and " + python-dateutil==" not in out

    # vdk's environment: the same python-dateutil, and pip check as clean as before
    assert importlib.metadata.version("python-dateutil") == before != OLD
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr

    again = vdk_run(job, cache)  # unchanged requirements: the overlay is taken from the cache, uv does not run
    assert again.returncode == 0, again.stdout
    assert "into the run's dependency overlay" not in again.stdout
    assert "1 package in the run's overlay (from the cache)" in again.stdout
    assert f"dateutil {OLD} from {shown.group(2)}" in again.stdout

    full = vdk_run(job, cache, "--full")  # a full local run uses it too
    assert full.returncode == 0, full.stdout
    assert f"dateutil {OLD} from {shown.group(2)}" in full.stdout


def test_with_requirements_overlay_false_the_run_uses_vdk_s_environment_as_it_is(tmp_path, wheelhouse):
    job = dateutil_job(tmp_path, wheelhouse, ml="requirements_overlay = false\n")
    done = vdk_run(job, tmp_path / "cache")
    assert done.returncode == 0, done.stdout
    assert f"dateutil {importlib.metadata.version('python-dateutil')} from" in done.stdout
    assert "the run's overlay" not in done.stdout and "dependency overlay" not in done.stdout
    assert not (tmp_path / "cache" / "overlays").exists()


def test_requirements_uv_cannot_install_fail_before_the_run_with_uv_s_reason(tmp_path, wheelhouse):
    requirements = f"--no-index\n--find-links {wheelhouse}\npython-dateutil==99.0\n"
    job = write_job(tmp_path, "unresolvable", files={"train.py": SCRIPT, "requirements.txt": requirements})
    done = vdk_run(job, tmp_path / "cache")
    out = done.stdout
    assert done.returncode != 0
    assert f"requirements.txt cannot be installed for this Python ({Path(sys.executable).parent}/python" in out, out
    assert "python-dateutil" in out and "smoke run of" not in out  # nothing started
    assert "Using CPython" not in out  # uv's chatter is not part of its reason
    assert "`requirements_overlay = false` in [ml-training]" in out
    assert not list((tmp_path / "cache" / "overlays").glob("*/overlay.json"))  # nothing half-made is kept
