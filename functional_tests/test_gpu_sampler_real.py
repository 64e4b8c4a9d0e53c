"""The GPU sampler on a real GPU, when this machine has one (skipped otherwise): a short real training on the
GPU through the bootstrap of a job image, with the real driver's NVML and nvidia-ml-py. The node's totals must be
in range (SM activity of a busy matmul loop above zero, memory in use below the capacity, the first step seen),
and the `vdk show`-style panel of them is printed, so that a machine with a GPU can confirm what the fake NVML
tests cannot: what the driver reports.

    .venv/bin/python -m pytest functional_tests/test_gpu_sampler_real.py -s
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from vdk.plugin.ml_training.cli.cluster_views import gpu_panel
from vdk.plugin.ml_training.cli.cluster_views import gpu_summary_text
from vdk.plugin.ml_training.k8s.gpu_measure import NodeGpus
from vdk.plugin.ml_training.k8s.gpu_measure import RunGpus
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines


def _gpu() -> str | None:
    """Why there is no GPU to test on, or None when there is one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - no binding, no driver, no GPU: all mean "skip"
        return f"no NVML on this machine ({type(e).__name__}: {e})"
    if not count:
        return "NVML finds no GPU on this machine"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} cannot use the GPU (a CPU build?): install a CUDA build of torch"
    return None


WHY_NOT = _gpu()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"needs a GPU: {WHY_NOT}")

TRAIN = """
import time
import torch

device = torch.device("cuda", 0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(2048, 4096, device=device)
ends = time.monotonic() + 20
steps = 0
while time.monotonic() < ends:
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    steps += 1
torch.cuda.synchronize()
print(f"trained {steps} steps", flush=True)
"""


def test_a_short_training_on_a_real_gpu_gives_figures_in_range(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    termination = tmp_path / "termination-log"
    termination.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env.update(
        CUDA_VISIBLE_DEVICES=env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
        RANK="0",
        LOCAL_RANK="0",
        VDK_ML_TRAINING_GPU_SAMPLE_SECONDS="0.5",
        VDK_ML_TRAINING_PROGRESS_SECONDS="5",
        VDK_ML_TRAINING_TERMINATION_LOG=str(termination),
    )
    done = subprocess.run(
        [sys.executable, "-m", "vdk.plugin.ml_training.runtime.bootstrap", "train.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GPU sampling stopped" not in done.stderr
    totals = parse_gpu_lines(termination.read_text().splitlines())["0"]
    assert totals.final and totals.gpus == 1 and totals.source in ("gpm", "util")
    assert totals.model and totals.mem_total > 0 and 0 < totals.mem_peak <= totals.mem_total
    assert totals.sm_mean is not None and 0 < totals.sm_mean <= 100 and totals.sm_p95 <= 100
    assert totals.first_step is not None and totals.steps > 10 and totals.seconds >= 15
    assert 0 < totals.utilisation <= 1 and totals.window_gpu_s > 0
    run = RunGpus((NodeGpus("0", "this machine", totals),))
    print()
    print(f"  GPUs       {gpu_summary_text(run.figures)}")
    print("\n".join(gpu_panel(run)))
