"""The Python API page (docs/python-api.md) runs as written: its python cells, in order and in one namespace as a
notebook runs them, against a job of the tests (the ddp-nccl example's code, on the tests' base image), the tests'
registry and the fake API server. Between cells the test plays the training operator: every run started so far
ends Succeeded, so the page's `if_changed` deploy finds nothing changed since a successful run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.jobs import write_job

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "python-api.md"
SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-01-02T04:00:00Z"}]}


def cells() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.M | re.S)


def test_the_page_has_the_cells_this_test_runs():
    assert len(cells()) == 2 and "from vdk.plugin.ml_training import api" in cells()[0]


@pytest.mark.slow
def test_the_page_s_cells_run_in_order_against_the_tests_registry_and_cluster(
    tmp_path, registry, base_image, cluster, monkeypatch, capfd
):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.chdir(tmp_path)
    write_job(
        tmp_path / "jobs",
        "mnist-ddp",
        team="vision",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\nnodes = 2\n"
        "gpus_per_node = 1\nsmoke_steps = 2\nargs = --epochs 3 --batch-size 32\n",
        files={"train.py": (ROOT / "examples" / "ddp-nccl" / "train.py").read_text()},
    )
    notebook: dict = {"__name__": "__notebook__"}
    for number, cell in enumerate(cells(), 1):
        exec(compile(cell, f"{PAGE}, cell {number}", "exec"), notebook)
        for run in fake.stored("pytorchjobs"):  # the operator: every run started so far has ended well
            fake.set_status("pytorchjobs", run["metadata"]["name"], SUCCEEDED)
    shown = capfd.readouterr().out
    assert "smoke run passed" in shown  # the page's reporter was told how the run ended
    assert "kind: Job" in shown and "vdk.io/run" in shown  # the dry run's manifests (backend auto: an Indexed Job)
    (first,) = [run["metadata"]["name"] for run in fake.stored("pytorchjobs")]  # the nightly deploy started none
    assert f"started {first} from {registry.host}/team/mnist-ddp@sha256:" in shown
    assert f" ['{first}']\n" in shown  # `vdk show`: the job's one run
    assert f"nothing changed since run {first}" in shown
    assert "[] Succeeded Succeeded" in shown  # the run compared with itself: nothing changed
    assert isinstance(notebook["job"], notebook["api"].JobDetail)  # the types come from the front door too
