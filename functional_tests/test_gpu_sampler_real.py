"""The GPU sampler on a real GPU, when this machine has one (skipped otherwise), with the real driver's NVML and
nvidia-ml-py:

- a short real training on the GPU through the bootstrap of a job image: the node's totals in range (SM activity
  of a busy matmul loop above zero, memory in use below the capacity, the first step seen), and the
  `vdk show`-style panel of them printed;
- the sampler's readings against `nvidia-smi` read at the same moments (functional_tests/gpu/smi.py states the
  tolerance), through a busy and an idle phase, and the usage summary, panel and sizing advice computed from
  those real samples;
- `idle_timeout` stopping a `vdk run --full` whose GPU stays idle after its first step.

So a machine with a GPU confirms what the fake NVML tests cannot: what the driver reports. The check of
docs/gpu-verification.md runs these and keeps their figures for its report.

    .venv/bin/python -m pytest functional_tests/test_gpu_sampler_real.py -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from functional_tests.gpu import smi
from functional_tests.gpu.report import keep_figures
from vdk.plugin.ml_training.cli.cluster_views import gpu_panel
from vdk.plugin.ml_training.cli.cluster_views import gpu_summary_text
from vdk.plugin.ml_training.diagnosis import sizing
from vdk.plugin.ml_training.k8s.gpu_measure import NodeGpus
from vdk.plugin.ml_training.k8s.gpu_measure import RunGpus
from vdk.plugin.ml_training.runtime import nvml_devices
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines
from vdk.plugin.ml_training.runtime.gpu_sampler import GpuSampler
from vdk.plugin.ml_training.runtime.gpu_sampler import SamplerSettings


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
    keep_figures("training_totals", figures=totals.to_dict(), panel=gpu_panel(run, unicode=False))


# A load on the GPU in phases: memory held and the GPU idle, then bf16 matrix products back to back, then idle
# again; it prints when each phase began and ended (Unix seconds).
LOAD = """
import json, time, torch

x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ballast = torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda")  # memory in use the sampler must see
torch.cuda.synchronize()
time.sleep(2)
phases = {"idle": [time.time()]}
time.sleep(6)
phases["idle"].append(time.time())
phases["busy"] = [time.time()]
ends = time.time() + 10
while time.time() < ends:
    for _ in range(10):
        y = x @ x
    torch.cuda.synchronize()
phases["busy"].append(time.time())
time.sleep(2)
print(json.dumps(phases), flush=True)
"""


class Recorded:
    """The real devices, each reading kept with the time it was taken (Unix seconds)."""

    def __init__(self, devices):
        self.inner = devices
        self.readings: list[smi.SamplerReading] = []

    def read(self):
        out = self.inner.read()
        self.readings.append(smi.SamplerReading(time.time(), out[0].sm, out[0].memory))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The sampler (the runtime's own, every 0.5 s) and nvidia-smi side by side through LOAD."""
    script = tmp_path_factory.mktemp("load") / "load.py"
    script.write_text(textwrap.dedent(LOAD))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}
    devices = Recorded(nvml_devices.open_devices(1))
    sampler = GpuSampler(SamplerSettings(period=0.5, line_seconds=0), devices, lambda: 0)
    query, dmon = smi.Poller(smi.QUERY + ["-i", "0"]).start(), smi.Poller(smi.DMON + ["-i", "0"]).start()
    sampler.start()
    load = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    figures = sampler.finish()
    query_lines, dmon_lines = query.stop(), dmon.stop()
    assert load.returncode == 0, load.stderr
    phases = json.loads(load.stdout.strip().splitlines()[-1])
    readings = [r for r in map(smi.parse_query_line, query_lines) if r is not None]
    comparison = smi.compare(
        devices.source,
        devices.readings,
        readings,
        smi.parse_dmon(dmon_lines),
        busy=tuple(phases["busy"]),
        idle=tuple(phases["idle"]),
    )
    keep_figures(
        "sampler",
        **comparison.to_dict(),
        sampler_readings=len(devices.readings),
        smi_readings=len(readings),
        dmon_error=dmon.error,
        dmon_head=dmon_lines[:4],
    )
    return figures, comparison, devices


def test_the_sampler_reads_what_nvidia_smi_reads_at_the_same_moments(measured):
    figures, comparison, devices = measured
    assert figures is not None and figures.final, "the sampler stopped after an NVML error"
    assert comparison.pairs >= 20, comparison
    assert comparison.within_tolerance, f"{comparison.problems} ({smi.tolerance_text()})"
    # the load's phases are told apart: matrix products keep the SMs busy, the idle phase does not
    assert comparison.busy_sampler is not None and comparison.busy_sampler > 50, comparison
    assert comparison.idle_sampler is not None and comparison.idle_sampler < 5, comparison
    assert figures.mem_peak >= 8 * 2**30 and figures.mem_peak <= figures.mem_total


def test_the_usage_summary_and_advice_come_from_the_real_samples(measured):
    figures, _, devices = measured
    run = RunGpus((NodeGpus("0", "this machine", figures),))
    summary = gpu_summary_text(run.figures, unicode=False)
    panel = gpu_panel(run, unicode=False)
    evidence = sizing.SizingEvidence(
        nodes=(figures,),
        gpus_per_node=1,
        mig_profile=None,
        gpu_hours=figures.seconds / 3600,
        run_seconds=figures.seconds,
    )
    advice = sizing.advise(evidence)
    keep_figures(
        "usage",
        summary=summary,
        panel=panel,
        advice=[{"what": f.what, "fix": f.fix} for f in advice],
        model=figures.model,
        source=figures.source,
    )
    print("\n" + summary + "\n" + "\n".join(panel) + "\n" + "\n".join(f"{f.what} -> {f.fix}" for f in advice))
    assert f"memory peak {figures.mem_peak / 2**30:.1f}" in summary
    assert figures.model in " ".join(panel)
    # 8 GiB of a whole GPU, its SMs busy less than half of the time: the advice says what to change
    assert advice, f"no advice for {summary}"
    assert any("gpus_per_node = " in (f.fix or "") or "batch" in (f.fix or "") for f in advice), advice


IDLE = """
import time
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(16, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100_000):  # one tiny step every 50 ms: the GPU idles between them
        model(torch.ones(4, 16, device="cuda")).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.05)
    print("trained", flush=True)
"""


def test_idle_timeout_stops_a_full_run_whose_gpu_stays_idle(tmp_path):
    job = tmp_path / "idle-job"
    job.mkdir()
    (job / "config.ini").write_text("[job]\ntype = ml-training\n[ml-training]\ngpus_per_node = 1\nidle_timeout = 5s\n")
    (job / "train.py").write_text(textwrap.dedent(IDLE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    env["VDK_ML_TRAINING_RUNS_DIR"] = str(tmp_path / "runs")
    vdk = Path(sys.executable).with_name("vdk")
    started = time.monotonic()
    done = subprocess.run([str(vdk), "run", "--full", str(job)], env=env, capture_output=True, text=True, timeout=240)
    seconds = time.monotonic() - started
    said = done.stdout + done.stderr
    line = next((x for x in said.splitlines() if "[vdk-ml-training] idle:" in x), "")
    keep_figures("idle_policy", seconds=round(seconds, 1), exit_code=done.returncode, line=line)
    assert done.returncode != 0 and "trained" not in said, said[-3000:]
    assert "every GPU of node 0 below 5% SM activity for 5s" in line, said[-3000:]
    assert "full run FAILED" in said and "stopped by idle_timeout" in said, said[-3000:]
    assert seconds < 180, f"stopped after {seconds:.0f} s"
