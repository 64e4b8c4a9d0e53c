"""The GPU sampler against a fake NVML (tests/support/fake_nvml.c, built with `cc`) that plays back scripted
readings, so that NVIDIA's own binding (nvidia-ml-py) runs its real code path: a whole GPU with GPM (Hopper), MIG
slices with and without GPM, a GPU without GPM (the utilisation rate), NVML missing, and NVML failing mid-run
(the sampler stops and says so once; the training is not disturbed). Then through the bootstrap of a job image:
a real training with its GPU lines, its totals in the termination message, and the idle policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import fake_nvml
from tests.support.fake_nvml import A100
from tests.support.fake_nvml import GIB
from tests.support.fake_nvml import H100
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_line
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines
from vdk.plugin.ml_training.runtime.idle_policy import IDLE_EXIT_CODE
from vdk.plugin.ml_training.runtime.idle_policy import parse_idle

BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"
H100_PROFILES = ((0, "MIG 1g.10gb", 1, 9856), (1, "MIG 2g.20gb", 2, 20096), (2, "MIG 3g.40gb", 3, 40320),
                 (3, "MIG 4g.40gb", 4, 40320), (4, "MIG 7g.80gb", 7, 80896))  # fmt: skip

# Samples the node's devices with the real binding: one sample per clock second, steps as scripted.
SAMPLE = """
import io, json, sys
from vdk.plugin.ml_training.runtime import gpu_sampler, nvml_devices
steps = json.loads(sys.argv[1])
now = [0.0]
devices = nvml_devices.open_devices()
err = io.StringIO()
sampler = gpu_sampler.GpuSampler(
    gpu_sampler.SamplerSettings(period=1, line_seconds=0), devices, lambda: steps[min(int(now[0]), len(steps) - 1)],
    clock=lambda: now[0], wall=lambda: 1_700_000_000 + now[0], out=io.StringIO(), err=err)
kept = True
for second in range(len(steps)):
    now[0] = float(second)
    kept = sampler.sample() and kept
figures = sampler.finish()
print(json.dumps({"figures": figures.to_dict() if figures else None, "line": sampler.last_line, "kept": kept,
                  "warnings": err.getvalue()}))
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return fake_nvml.build(tmp_path_factory.mktemp("fake-nvml"))


def sample(library: Path, script: fake_nvml.Script, tmp_path: Path, steps: list[int], **env: str) -> dict:
    path = script.write(tmp_path / "nvml-script.tsv")
    done = subprocess.run(
        [sys.executable, "-c", SAMPLE, json.dumps(steps)],
        env=fake_nvml.environment(library, path, tmp_path / "calls.txt", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# steps: none for 3 s (start-up), then one a second for 6 s, then none for 3 s (after the last step)
STEPS = [0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 6, 6]


def test_a_whole_hopper_gpu_is_read_through_gpm_sm_activity(library, tmp_path):
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=True)
    script.profiles(0, H100_PROFILES)
    for second, steps in enumerate(STEPS):
        training = 0 < steps < 6 or second == 8
        sm = 80.0 if training else 2.0
        script.tick(gpu, sm=sm, occupancy=sm / 2, memory=(30 if training else 4) * GIB, power_mw=650_000)
    result = sample(library, script, tmp_path, STEPS)
    f = result["figures"]
    assert (f["source"], f["gpus"], f["model"], f["profile"]) == ("gpm", 1, "NVIDIA H100 80GB HBM3", None)
    # GPM needs two samples for an interval: the first tick gives none; the other 11 are read, and the last
    # once more when the script ends
    assert f["sm_mean"] == pytest.approx((6 * 80 + 6 * 2) / 12)
    assert f["sm_p95"] == 80.0 and f["occupancy_mean"] == pytest.approx(f["sm_mean"] / 2)
    assert (f["mem_peak"], f["mem_total"], f["power_w"]) == (30 * GIB, H100[1], 650.0)
    # the first step came at second 3, the last at 8: the window is 3..8, the seconds after it are not
    assert (f["first_step"], f["last_step"], f["steps"]) == (1_700_000_003, 1_700_000_008, 6)
    assert f["window_gpu_s"] == pytest.approx(5.0) and f["idle_gpu_s"] == 0.0
    assert f["busy_gpu_s"] == pytest.approx((6 * 80 + 5 * 2) / 100) and f["sampled_gpu_s"] == pytest.approx(11.0)
    assert [p["profile"] for p in f["profiles"]] == ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert f["final"] and result["warnings"] == ""
    assert parse_gpu_line(result["line"]).sm_mean == pytest.approx(f["sm_mean"], abs=0.05)


def test_mig_slices_are_sampled_each_with_gpm_through_their_gpu_instance(library, tmp_path):
    script = fake_nvml.Script()
    script.gpu(*H100, gpm=True, mig=True)
    first = script.mig(0, 7, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9856 << 20)
    second = script.mig(0, 8, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9856 << 20)
    script.tick(first, sm=60.0, memory=5 * GIB, repeat=len(STEPS))
    script.tick(second, sm=20.0, memory=7 * GIB, repeat=len(STEPS))
    f = sample(library, script, tmp_path, STEPS)["figures"]
    assert (f["source"], f["gpus"], f["profile"], f["model"]) == ("gpm", 2, "1g.10gb", "NVIDIA H100 80GB HBM3")
    assert f["sm_gpus"] == [60.0, 20.0] and f["sm_mean"] == pytest.approx(40.0)
    assert (f["mem_peak"], f["mem_total"]) == (7 * GIB, 9856 << 20)  # a slice's capacity, not the GPU's
    assert f["power_w"] is None  # not readable on a slice
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert "nvmlGpmMigSampleGet" in calls and "nvmlGpmSampleGet" not in calls


def test_mig_slices_of_a_gpu_without_gpm_give_memory_only(library, tmp_path):
    script = fake_nvml.Script()
    script.gpu(*A100, gpm=False, mig=True)
    mig = script.mig(0, 1, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40192 << 20)
    for i in range(len(STEPS)):
        script.tick(mig, memory=(10 + i) * GIB)
    result = sample(library, script, tmp_path, STEPS)
    f = result["figures"]
    assert (f["source"], f["profile"], f["sm_mean"], f["utilisation"]) == ("none", "3g.40gb", None, None)
    assert f["mem_peak"] == (10 + len(STEPS) - 1) * GIB and f["mem_total"] == 40192 << 20
    assert result["warnings"] == ""


def test_a_gpu_without_gpm_is_read_through_its_utilisation_rate(library, tmp_path):
    script = fake_nvml.Script()
    gpu = script.gpu(*A100, gpm=False, power=False)
    script.tick(gpu, sm=55.0, memory=12 * GIB, repeat=len(STEPS))
    f = sample(library, script, tmp_path, STEPS)["figures"]
    assert (f["source"], f["sm_mean"], f["occupancy_mean"], f["power_w"]) == ("util", 55.0, None, None)
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert "nvmlDeviceGetUtilizationRates" in calls and "nvmlGpmSampleGet" not in calls


def test_gpus_outside_cuda_visible_devices_are_not_sampled(library, tmp_path):
    script = fake_nvml.Script()
    busy = script.gpu(*H100, uuid="GPU-11111111-aaaa-bbbb-cccc-000000000000", gpm=False)
    idle = script.gpu(*H100, uuid="GPU-22222222-aaaa-bbbb-cccc-000000000000", gpm=False)
    script.tick(busy, sm=90.0, repeat=len(STEPS))
    script.tick(idle, sm=0.0, repeat=len(STEPS))
    by_index = sample(library, script, tmp_path, STEPS, CUDA_VISIBLE_DEVICES="0")["figures"]
    by_uuid = sample(library, script, tmp_path, STEPS, CUDA_VISIBLE_DEVICES="GPU-22222222")["figures"]
    assert (by_index["gpus"], by_index["sm_mean"]) == (1, 90.0)
    assert (by_uuid["gpus"], by_uuid["sm_mean"]) == (1, 0.0)


def test_an_nvml_error_mid_run_stops_sampling_once_with_one_warning(library, tmp_path):
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=False)
    script.tick(gpu, sm=70.0, memory=GIB, repeat=4)
    script.tick(gpu, error=15)  # NVML_ERROR_GPU_IS_LOST
    script.tick(gpu, sm=70.0, memory=GIB, repeat=8)
    result = sample(library, script, tmp_path, STEPS)
    assert result["figures"] is None and not result["kept"]
    assert result["warnings"] == (
        "[vdk-ml-training] warning: GPU sampling stopped after an NVML error (NVMLError_GpuIsLost: GPU is lost); "
        "training goes on\n"
    )
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    reads = [c for c in calls if c == "nvmlDeviceGetUtilizationRates"]
    assert len(reads) == 5  # four samples and the failing one: nothing was read after it
    assert calls[-1] == "nvmlShutdown"


# --- through the bootstrap of a job image ------------------------------------------------------------------

TRAIN = """
import time
import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
time.sleep(0.6)  # loading
for step in range({steps}):
    model(torch.ones(4, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(0.05)
time.sleep(0.4)  # after the last step
print("trained", flush=True)
"""


def run_image(library: Path | None, script: fake_nvml.Script | None, tmp_path: Path, steps: int = 30,
              **env: str) -> tuple[subprocess.CompletedProcess, str]:  # fmt: skip
    """The bootstrap as a job image runs it (no local launcher), with the fake NVML; (process, termination)."""
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN.format(steps=steps)))
    termination = tmp_path / "termination-log"
    termination.write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VDK_ML_TRAINING_", "FAKE_NVML"))}
    if library is not None and script is not None:
        base = fake_nvml.environment(library, script.write(tmp_path / "nvml-script.tsv"))
        base = {k: v for k, v in base.items() if not k.startswith("VDK_ML_TRAINING_")}
    settings = {
        "VDK_ML_TRAINING_GPU_SAMPLE_SECONDS": "0.05",
        "VDK_ML_TRAINING_PROGRESS_SECONDS": "0.5",
        "VDK_ML_TRAINING_TERMINATION_LOG": str(termination),
        "RANK": "0",
        "LOCAL_RANK": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, "train.py"],
        cwd=tmp_path,
        env={**base, **settings, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, termination.read_text()


def busy_gpu(sm: float = 85.0, ticks: int = 4000) -> fake_nvml.Script:
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=True)
    script.tick(gpu, sm=sm, occupancy=30.0, memory=20 * GIB, power_mw=500_000, repeat=ticks)
    return script


@pytest.mark.slow
def test_a_training_in_an_image_prints_gpu_lines_and_leaves_its_totals_after_its_last_progress_line(library, tmp_path):
    done, message = run_image(library, busy_gpu(), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout and "warning" not in done.stderr
    lines = [parse_gpu_line(line) for line in done.stdout.splitlines() if line.startswith("[vdk-ml-training] gpu ")]
    assert len(lines) >= 2 and lines[-1].final and not any(f.final for f in lines[:-1])
    final = lines[-1]
    assert (final.source, final.gpus, final.steps) == ("gpm", 1, 30)
    assert final.sm_mean == pytest.approx(85.0) and final.mem_peak == 20 * GIB
    assert final.first_step is not None and final.startup_seconds >= 0.5  # the loading before the first step
    # the termination message: rank 0's last progress line, then the node's GPU totals as a postscript
    first, second = message.splitlines()
    assert first.startswith("[vdk-ml-training] progress step=30 ") and "script=finished" in first
    assert parse_gpu_lines([second])["0"].final


@pytest.mark.slow
def test_without_nvml_the_training_runs_as_ever_and_nothing_is_said(tmp_path):
    done, message = run_image(None, None, tmp_path, LD_LIBRARY_PATH="")
    assert done.returncode == 0, done.stderr
    assert "[vdk-ml-training] gpu" not in done.stdout and "GPU" not in done.stderr and "nvml" not in done.stderr.lower()
    assert "gpu" not in message


@pytest.mark.slow
def test_an_nvml_error_mid_training_does_not_disturb_it(library, tmp_path):
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=False)
    script.tick(gpu, sm=70.0, memory=GIB, repeat=6)
    script.tick(gpu, error=15, repeat=4000)
    done, message = run_image(library, script, tmp_path)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "GPU sampling stopped" in line]
    assert warnings == [
        "[vdk-ml-training] warning: GPU sampling stopped after an NVML error (NVMLError_GpuIsLost: GPU is lost); "
        "training goes on"
    ]
    assert not any(f.final for f in parse_gpu_lines(done.stdout.splitlines()).values())
    assert message.startswith("[vdk-ml-training] progress step=30 ") and "gpu" not in message


@pytest.mark.slow
def test_idle_timeout_stops_a_run_whose_gpus_stay_idle_after_its_first_step(library, tmp_path):
    done, message = run_image(library, busy_gpu(sm=1.0), tmp_path, steps=400, VDK_ML_TRAINING_IDLE_SECONDS="1")
    assert done.returncode == IDLE_EXIT_CODE, done.stderr
    assert "trained" not in done.stdout
    idle = parse_idle(done.stderr.splitlines())
    assert idle is not None and idle.node == "0" and idle.seconds >= 1 and idle.last_step
    assert "every GPU of node 0 below 5% SM activity for 1s" in done.stderr
    assert any("train.py" in frame for _, frames in idle.threads for frame in frames)
    # the termination message: the idle line and the training thread's top frames, then the GPU totals
    assert parse_idle(message.splitlines()) is not None
    assert parse_gpu_lines(message.splitlines())["0"].final


# --- NVML out of the training's way: a wedged driver, a crash inside NVML ---------------------------------------

PROBED = """
import json, sys, time
from vdk.plugin.ml_training.runtime import gpu_sampler, nvml_probe
nvml_probe.CALL_SECONDS = float(sys.argv[2])
began = time.monotonic()
sampler = gpu_sampler.start(lambda: 1, settings=gpu_sampler.SamplerSettings(period=0.05, line_seconds=0))
started = time.monotonic() - began
time.sleep(float(sys.argv[1]))  # the training, going on
ending = time.monotonic()
figures = sampler.finish() if sampler else None
print(json.dumps({"started_in": started, "ended_in": time.monotonic() - ending,
                  "figures": figures.to_dict() if figures else None, "alive": True}))
"""


def probed(
    library, script, tmp_path, train_seconds: float, call_seconds: float = 10, **env: str
) -> tuple[subprocess.CompletedProcess, dict]:
    path = script.write(tmp_path / "nvml-script.tsv")
    done = subprocess.run(
        [sys.executable, "-c", PROBED, str(train_seconds), str(call_seconds)],
        env={**fake_nvml.environment(library, path, tmp_path / "calls.txt", **env), "LOCAL_RANK": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stdout)


def probe_processes(marker: Path, within: float = 5.0) -> list[str]:
    """Probe processes that read this test's fake NVML script still running after `within` seconds (a probe
    whose rank 0 is gone ends within a second)."""
    deadline = time.monotonic() + within
    while True:
        found = _probes(marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _probes(marker: Path) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(marker).encode() in environ and b"nvml_probe" in command:
            out.append(pid)
    return out


def test_an_nvml_init_that_hangs_holds_up_neither_the_start_nor_the_end_of_the_training(library, tmp_path):
    done, result = probed(library, busy_gpu(), tmp_path, 0.5, FAKE_NVML_INIT_HANG="1")
    assert result["started_in"] < 0.5 and result["figures"] is None and result["ended_in"] < 1.5
    assert "GPU sampling never started: NVML has not answered yet (a driver in trouble)" in done.stderr
    assert done.stderr.count("warning") == 1
    assert probe_processes(tmp_path / "nvml-script.tsv") == []  # it went with the training's process


def test_a_crash_inside_nvml_ends_sampling_not_the_training(library, tmp_path):
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=False)
    script.tick(gpu, sm=70.0, memory=GIB, repeat=3)
    script.tick(gpu, error=fake_nvml.CRASH)
    done, result = probed(library, script, tmp_path, 1.5)
    assert result["alive"] and result["figures"] is None
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "[vdk-ml-training] warning: GPU sampling stopped: NVML crashed (SIGSEGV) in the probe process (a reading of "
        "the GPUs); training goes on"
    ]


def test_a_reading_that_never_returns_is_given_up_after_its_bound(library, tmp_path, monkeypatch):
    script = fake_nvml.Script()
    gpu = script.gpu(*H100, gpm=False)
    script.tick(gpu, sm=70.0, memory=GIB, repeat=2)
    script.tick(gpu, error=fake_nvml.HANG)
    done, result = probed(library, script, tmp_path, 2.5, call_seconds=1)
    assert result["figures"] is None
    assert "GPU sampling stopped: NVML did not answer within 1 s (a reading of the GPUs)" in done.stderr
    assert probe_processes(tmp_path / "nvml-script.tsv") == []  # killed: not left hanging in the driver


def test_without_libnvidia_ml_the_sampler_says_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBED, "0.3", "10"], env={**os.environ, "LD_LIBRARY_PATH": "", "LOCAL_RANK": "0"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and json.loads(done.stdout)["figures"] is None and done.stderr == ""
