"""`vdk run --full` on a machine with a GPU samples it: the real `vdk` with a fake NVML (tests/support/fake_nvml.c)
that the real nvidia-ml-py loads, and CUDA_VISIBLE_DEVICES naming one GPU (the training itself runs on the CPU).
The node's GPU lines reach the console; `idle_timeout` stops a run whose GPU stays idle after its first step, and
the run's summary says so with the fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import fake_nvml
from tests.support.fake_nvml import GIB
from tests.support.fake_nvml import H100
from tests.support.vdk_cli import vdk_process
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines

TRAIN = """
import time
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range({steps}):
        model(torch.ones(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.01)
    print("trained", flush=True)
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return fake_nvml.build(tmp_path_factory.mktemp("fake-nvml"))


def full_run(library: Path, tmp_path: Path, sm: float, steps: int, ml: str = ""):
    job = tmp_path / "gpu-job"
    job.mkdir()
    (job / "config.ini").write_text(f"[job]\ntype = ml-training\n[ml-training]\ngpus_per_node = 1\n{ml}")
    (job / "train.py").write_text(textwrap.dedent(TRAIN.format(steps=steps)))
    script = fake_nvml.Script()
    gpu = script.gpu(*H100)
    script.tick(gpu, sm=sm, memory=3 * GIB, power_mw=200_000, repeat=3000)
    env = fake_nvml.environment(library, script.write(tmp_path / "nvml.tsv"))
    env.update(CUDA_VISIBLE_DEVICES="0", VDK_ML_TRAINING_PROGRESS_SECONDS="1")
    return vdk_process("run", "--full", str(job), env=env, timeout=180)


@pytest.mark.slow
def test_a_full_run_prints_its_gpu_lines_and_totals(library, tmp_path):
    done = full_run(library, tmp_path, sm=70.0, steps=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "full run PASSED" in done.stdout + done.stderr
    found = parse_gpu_lines((done.stdout + done.stderr).splitlines())
    assert found["0"].final and found["0"].source == "gpm" and found["0"].sm_mean == pytest.approx(70.0)
    assert found["0"].steps == 300 and found["0"].mem_peak == 3 * GIB


@pytest.mark.slow
def test_idle_timeout_stops_a_full_run_and_its_summary_says_why(library, tmp_path):
    done = full_run(library, tmp_path, sm=1.0, steps=100_000, ml="idle_timeout = 2s\n")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "trained" not in said
    assert "[vdk-ml-training] idle: every GPU of node 0 below 5% SM activity for 2s" in said
    assert "full run FAILED" in said and "rank 0 failed: every GPU of node 0 below 5% SM activity for 2s" in said
    assert "If the run waits like this on purpose, raise `idle_timeout` in [ml-training]" in said
    assert 'File "' in said and "train.py" in said  # where it was
