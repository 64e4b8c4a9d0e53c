"""The GPU sampler's own logic, over devices played by a Python object (the NVML path has its integration tests
against a fake libnvidia-ml): its figures, its lines, its end, an error that stops it once, the idle policy it
feeds, its settings, and that it stays silent without NVML or on other local ranks."""

from __future__ import annotations

import io
import sys
import time

import pytest

from vdk.plugin.ml_training.runtime import gpu_sampler
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_line
from vdk.plugin.ml_training.runtime.gpu_sampler import GpuSampler
from vdk.plugin.ml_training.runtime.gpu_sampler import SamplerSettings
from vdk.plugin.ml_training.runtime.idle_policy import IDLE_EXIT_CODE
from vdk.plugin.ml_training.runtime.nvml_devices import Reading


class Devices:
    """Two GPUs whose readings are played from `sm` (one value per sample); an exception is raised instead."""

    def __init__(self, sm: list, source: str = "gpm"):
        self.sm = list(sm)
        self.source = source
        self.devices = [object(), object()]
        self.model = "NVIDIA H100 80GB HBM3"
        self.profile = None
        self.profiles = ()
        self.memory_total = 80 * GIB
        self.reads = 0
        self.closed = False

    def read(self):
        value = self.sm[min(self.reads, len(self.sm) - 1)]
        self.reads += 1
        if isinstance(value, Exception):
            raise value
        return [Reading(value, None, (10 + self.reads) * GIB, 300.0), Reading(value, None, GIB, 310.0)]

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def sampler(devices, steps, clock, **settings) -> tuple[GpuSampler, io.StringIO, io.StringIO, list]:
    out, err, exits = io.StringIO(), io.StringIO(), []
    made = GpuSampler(
        SamplerSettings(**{"period": 1, "line_seconds": 0, **settings}),
        devices,
        lambda: steps[0],
        node="3",
        clock=clock,
        wall=lambda: 1_700_000_000 + clock.now,
        out=out,
        err=err,
        exit=exits.append,
    )
    return made, out, err, exits


def test_figures_and_the_final_line(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_TERMINATION_LOG", str(tmp_path / "termination-log"))
    (tmp_path / "termination-log").write_text("[vdk-ml-training] progress step=3 script=finished\n")
    clock, steps = Clock(), [0]
    devices = Devices([10.0, 60.0, 80.0, 80.0, 0.0])
    made, out, err, _ = sampler(devices, steps, clock)
    for second, count in enumerate([0, 1, 2, 3, 3]):
        clock.now, steps[0] = float(second), count
        assert made.sample()
    figures = made.finish()
    assert devices.closed and err.getvalue() == ""
    assert (figures.node, figures.gpus, figures.source, figures.steps, figures.final) == ("3", 2, "gpm", 3, True)
    assert figures.sm_mean == pytest.approx((10 + 60 + 80 + 80 + 0 + 0) / 6)
    assert figures.mem_peak == 16 * GIB and figures.power_w == pytest.approx(305.0)
    assert (figures.first_step, figures.last_step) == (1_700_000_001, 1_700_000_003)
    assert figures.window_gpu_s == 4.0  # seconds 1 and 2, on two GPUs; 3 waits for a step that never comes
    assert out.getvalue() == figures.line() + "\n"
    message = (tmp_path / "termination-log").read_text().splitlines()
    assert message[0] == "[vdk-ml-training] progress step=3 script=finished"
    assert parse_gpu_line(message[1]).final


def test_an_error_stops_sampling_with_one_warning_and_no_totals():
    clock, steps = Clock(), [0]
    devices = Devices([50.0, RuntimeError("GPU is lost"), 50.0])
    made, out, err, _ = sampler(devices, steps, clock)
    assert made.sample()
    assert not made.sample()
    assert not made.sample()  # stopped: the device is not read again
    assert devices.reads == 2
    assert made.finish() is None and devices.closed and out.getvalue() == ""
    assert err.getvalue() == (
        "[vdk-ml-training] warning: GPU sampling stopped after an NVML error (RuntimeError: GPU is lost); "
        "training goes on\n"
    )


def test_the_idle_policy_fires_after_the_first_step_once_every_gpu_stayed_idle_that_long():
    clock, steps = Clock(), [0]
    devices = Devices([1.0] * 3 + [50.0] + [1.0] * 20)
    made, out, err, exits = sampler(devices, steps, clock, idle_seconds=5)
    for second in range(3):  # idle, but before the first step: start-up is not idleness
        clock.now = float(second)
        made.sample()
    steps[0] = 1
    for second in range(3, 12):
        clock.now = float(second)
        made.sample()
        if exits:
            break
    assert exits == [IDLE_EXIT_CODE]
    assert clock.now == 9.0  # idle from second 4 (50% at 3), stopped 5 s later
    idle = made.policy.fired
    assert (idle.node, idle.seconds, idle.last_step) == ("3", 5.0, 1)
    said = err.getvalue().splitlines()
    assert said[0] == (
        "[vdk-ml-training] idle: every GPU of node 3 below 5% SM activity for 5s (last step 1); stopped by idle_timeout"
    )
    assert said[1] == "[vdk-ml-training] stack rank=0 thread=MainThread (most recent call first)"


def test_no_idle_policy_where_activity_cannot_be_read():
    made, _, err, _ = sampler(Devices([None], source="none"), [0], Clock(), idle_seconds=5)
    assert made.policy is None
    assert "idle_timeout is off: these GPUs report no SM activity" in err.getvalue()


def test_lines_follow_the_progress_period():
    clock, steps = Clock(), [0]
    made, out, _, _ = sampler(Devices([40.0]), steps, clock, line_seconds=30)
    made._line_due = 30.0  # as start() sets it
    for second in range(0, 61):
        clock.now = float(second)
        made.sample()
        if clock.now >= made._line_due:
            made._line_due = clock.now + 30
            made._print(made.figures().line())
    assert len(out.getvalue().splitlines()) == 2


def test_settings_from_the_environment():
    env = {"VDK_ML_TRAINING_GPU_SAMPLE_SECONDS": "5", "VDK_ML_TRAINING_IDLE_SECONDS": "7200"}
    settings = SamplerSettings.from_env(env)
    assert (settings.period, settings.idle_seconds, settings.gpu_count, settings.problems) == (5, 7200, None, ())
    assert SamplerSettings(5, 7200, 2).env() == {**env, "VDK_ML_TRAINING_GPU_COUNT": "2"}
    bad = SamplerSettings.from_env({"VDK_ML_TRAINING_GPU_SAMPLE_SECONDS": "soon"})
    assert bad.period == 1 and bad.problems == (
        "VDK_ML_TRAINING_GPU_SAMPLE_SECONDS='soon' is not a number of seconds >= 0",
    )


def test_it_stays_silent_without_nvml_off_or_on_another_local_rank(monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert gpu_sampler.start(lambda: 0, settings=SamplerSettings()) is None
    monkeypatch.delitem(sys.modules, "pynvml")  # installed, no libnvidia-ml.so.1: tests/integration (a process)
    assert gpu_sampler.start(lambda: 0, settings=SamplerSettings(period=0)) is None
    assert gpu_sampler.start(lambda: 0, settings=SamplerSettings(gpu_count=0)) is None
    for none in ("", "-1", "-1,0", " "):  # CUDA shows this process no GPU: a CPU run starts no probe
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", none)
        assert gpu_sampler.start(lambda: 0, settings=SamplerSettings()) is None, none
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_sampler.start(lambda: 0, settings=SamplerSettings()) is None
    assert capsys.readouterr() == ("", "")


def test_a_process_shown_a_gpu_or_every_gpu_starts_its_sampler(monkeypatch, capsys):
    from vdk.plugin.ml_training.runtime import nvml_probe
    from vdk.plugin.ml_training.runtime.nvml_devices import NoDevices

    def none_here(limit):
        raise NoDevices("no GPU given to this node")  # what the probe says on this machine, without its process

    monkeypatch.setattr(nvml_probe, "open_devices", none_here)
    monkeypatch.setenv("LOCAL_RANK", "0")
    for shown in ("0", "GPU-1234,1", None):
        if shown is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", shown)
        made = gpu_sampler.start(lambda: 0, settings=SamplerSettings())
        assert made is not None, shown
        made._thread.join(5)
        assert made.finish() is None  # it found none: silent
    assert capsys.readouterr() == ("", "")


def test_the_container_cpu_is_read_from_its_cgroup(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 12500000\nuser_usec 10000000\n")
    (tmp_path / "cpu.max").write_text("400000 100000\n")
    assert gpu_sampler.container_cpu(str(tmp_path)) == (12.5, 4.0)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    used, limit = gpu_sampler.container_cpu(str(tmp_path))
    assert used == 12.5 and limit >= 1
    assert gpu_sampler.container_cpu(str(tmp_path / "none")) is None


def test_an_nvml_call_that_hangs_does_not_keep_the_script_from_ending(monkeypatch):
    import threading

    release, hanging = threading.Event(), threading.Event()

    class Hanging(Devices):
        def read(self):
            if self.reads:
                hanging.set()
                release.wait(30)
            return super().read()

    made, out, err, _ = sampler(Hanging([50.0]), [0], Clock(), period=0.01)
    made.start()
    monkeypatch.setattr(made._thread, "join", lambda timeout=None: None)  # its 5 s, without the wait
    assert hanging.wait(10)
    assert made.finish() is None
    assert "GPU sampling did not stop (an NVML call hangs): this node has no GPU totals" in err.getvalue()
    release.set()


def test_the_figures_another_reader_takes_leave_the_next_gpu_line_s_period_alone():
    """What a TrainJob's Kubeflow status posts (runtime/kubeflow_status.py) is read between two GPU lines."""
    clock, steps = Clock(), [0]
    made, _, _, _ = sampler(Devices([20.0, 40.0, 90.0]), steps, clock)
    for second in range(3):
        clock.now, steps[0] = float(second), second
        made.sample()
    now = made.current()
    assert (now.sm_now, now.final, now.sampled_gpu_s) == (90.0, False, 4.0)  # the last sample; 2 GPUs x 2 s
    assert now.utilisation == pytest.approx((40 + 90) / 2 / 100)
    assert made.figures().sm_now == pytest.approx(50.0)  # the line's period: every sample since the last line


def test_devices_opened_out_of_the_way_hold_up_nothing_and_a_failure_is_said_once(tmp_path, monkeypatch):
    """The devices are opened in the sampler's thread (the NVML probe, a process: tests/integration): an opener
    that hangs keeps nothing from starting or ending; one that fails is said once; one that finds GPUs samples."""
    import threading

    from vdk.plugin.ml_training.runtime.nvml_devices import NoDevices
    from vdk.plugin.ml_training.runtime.nvml_probe import ProbeFailed

    monkeypatch.setenv("VDK_ML_TRAINING_TERMINATION_LOG", str(tmp_path / "termination-log"))
    release = threading.Event()

    def hangs():
        release.wait(30)
        raise NoDevices("too late")

    def fails():
        raise ProbeFailed("NVML crashed (SIGSEGV) in the probe process (finding the GPUs)")

    for opener, said in ((hangs, "GPU sampling never started: NVML has not answered yet"),
                         (fails, "GPU sampling is off on this node: NVML crashed (SIGSEGV)")):  # fmt: skip
        err = io.StringIO()
        made = gpu_sampler.GpuSampler(SamplerSettings(period=0.01, line_seconds=0), None, lambda: 0, out=io.StringIO(),
                                      err=err, opener=opener).start()  # fmt: skip
        made._thread.join(0.2)
        assert made.finish() is None
        assert err.getvalue().count("warning:") == 1 and said in err.getvalue(), err.getvalue()
    release.set()

    out = io.StringIO()
    made = gpu_sampler.GpuSampler(SamplerSettings(period=0.01, line_seconds=0), None, lambda: 3, out=out,
                                  err=io.StringIO(), opener=lambda: Devices([40.0, 60.0])).start()  # fmt: skip
    deadline = time.monotonic() + 10
    while made.tally.sm_samples < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    figures = made.finish()
    assert figures is not None and figures.gpus == 2 and figures.steps == 3 and "final=1" in out.getvalue()
