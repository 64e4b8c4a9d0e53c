"""The GPU sampler of a training node: how busy its GPUs were (cluster runs, and `vdk run --full` on a machine
with GPUs; never smoke runs).

The local rank 0 of each node starts it (bootstrap.py through rank_process.py): a daemon thread that, once a
`period` (`gpu_sample_period`, 1 s by default), reads every GPU (or MIG slice) the node was given through NVML
(runtime/nvml_devices.py) — SM activity, memory in use, power — and adds it up (gpu_lines.Tally). Nothing is
added to a training step: the thread reads the step count the StepCounter keeps. At the period of the progress
lines it prints a GPU line of the figures so far; when the script ends, the node's totals (`final=1`), also
added to the container's termination message, where `vdk show` and `vdk list --usage` read them. It feeds the
idle policy (idle_policy.py) when `idle_timeout` asks for it.

NVML itself is called in a process of its own (runtime/nvml_probe.py), each call bounded: a driver in trouble — an
nvmlInit that hangs, a crash inside libnvidia-ml — never holds up rank 0's start nor ends the training. Without
NVML (no `nvidia-ml-py`, no driver, no GPU: every smoke run, CPU nodes) it says nothing. An NVML error, a call
that does not return or a crash of the probe stops sampling with one warning line; the training goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import TextIO

from vdk.plugin.ml_training.runtime import gpu_lines
from vdk.plugin.ml_training.runtime import idle_policy
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.gpu_lines import Tally
from vdk.plugin.ml_training.vocabulary import wire

# Set in the pods by the renderers and by `vdk run --full`, in seconds (absent: the defaults; 0: off).
SAMPLE_SECONDS = "VDK_ML_TRAINING_GPU_SAMPLE_SECONDS"
IDLE_SECONDS = "VDK_ML_TRAINING_IDLE_SECONDS"
GPU_COUNT = "VDK_ML_TRAINING_GPU_COUNT"  # `vdk run --full`: how many of the machine's GPUs its ranks use
LINE_SECONDS = protocol.PROGRESS_SECONDS  # GPU lines follow the progress lines' period
DEFAULT_SAMPLE_SECONDS = 1.0  # the default of the gpu_sample_period key
DEFAULT_LINE_SECONDS = progress_lines.DEFAULT_PERIOD_SECONDS
THREAD_NAME = idle_policy.SAMPLER_THREAD


@dataclass(frozen=True)
class SamplerSettings:
    """The sampler's settings of the environment; a value that does not parse is a problem, ignored."""

    period: float = DEFAULT_SAMPLE_SECONDS
    idle_seconds: float = 0.0
    gpu_count: int | None = None
    line_seconds: float = DEFAULT_LINE_SECONDS
    problems: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SamplerSettings:
        env = os.environ if env is None else env
        problems: list[str] = []

        def number(name: str, default: float) -> float:
            text = (env.get(name) or "").strip()
            if not text:
                return default
            try:
                value = float(text)
                if not (value >= 0 and math.isfinite(value)):
                    raise ValueError
            except ValueError:
                problems.append(f"{name}={text!r} is not a number of seconds >= 0")
                return default
            return value

        count = number(GPU_COUNT, -1)
        return cls(
            period=number(SAMPLE_SECONDS, DEFAULT_SAMPLE_SECONDS),
            idle_seconds=number(IDLE_SECONDS, 0.0),
            gpu_count=int(count) if count >= 0 else None,
            line_seconds=number(LINE_SECONDS, DEFAULT_LINE_SECONDS),
            problems=tuple(problems),
        )

    def env(self) -> dict[str, str]:
        """These settings as the environment of a training process (the line period is the progress lines')."""
        out = {SAMPLE_SECONDS: _text(self.period), IDLE_SECONDS: _text(self.idle_seconds)}
        if self.gpu_count is not None:
            out[GPU_COUNT] = str(self.gpu_count)
        return out


def _text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


class GpuSampler:
    """Samples `devices` (an nvml_devices.DeviceSet, or anything with its `read()`, `close()`, `model`,
    `profile`, `profiles`, `source`, `memory_total` and `devices`) from a daemon thread. `clock`, `wall`, `out`
    and `err` are there for tests; `step_count()` is the StepCounter's count (0 before torch is imported)."""

    def __init__(
        self,
        settings: SamplerSettings,
        devices: Any,
        step_count: Callable[[], int],
        node: str = "0",
        rank: str = "0",
        on_idle: Callable[[idle_policy.Idle], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        out: TextIO | None = None,
        err: TextIO | None = None,
        cpu: Callable[[], tuple[float, float | None] | None] | None = None,
        exit: Callable[[int], None] = os._exit,
        opener: Callable[[], Any] | None = None,
    ):
        self.settings = settings
        self.devices = devices
        self._opener = opener  # devices None: what opens them, in the sampler's thread (the NVML probe)
        self._node_rank = rank
        self._on_idle = on_idle
        self._exit = exit
        self.step_count = step_count
        self.node = node
        self._clock = clock
        self._wall = wall
        self._out = out or sys.stdout
        self._err = err
        self._cpu = cpu
        self.tally = Tally(idle_policy.IDLE_PERCENT)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = clock()
        self._started_wall = wall()
        self._last_at: float | None = None
        self._line_due = 0.0
        self._steps_seen = 0
        self._first_step: float | None = None
        self._last_step: float | None = None
        self._cpu_first: tuple[float, float] | None = None  # (clock, CPU seconds) at the first sample
        self._cpu_last: tuple[float, float] | None = None
        self.cpu_limit: float | None = None
        self.failed: str | None = None
        self.last_line: str | None = None
        self.policy: idle_policy.IdlePolicy | None = None
        if devices is not None:
            self._attach(devices)

    def _attach(self, devices: Any) -> None:
        """Sample `devices` from now on; the idle policy where their activity can be read."""
        self.devices = devices
        if self.settings.idle_seconds and devices.source != gpu_lines.NONE:
            self.policy = idle_policy.IdlePolicy(
                self.settings.idle_seconds, self.node, self._node_rank, on_idle=self._on_idle, out=self._err,
                exit=self._exit, postscript=self._final_line,
            )  # fmt: skip
        elif self.settings.idle_seconds:
            self._warn(
                "idle_timeout is off: these GPUs report no SM activity (MIG slices of GPUs without GPM), "
                "so idleness cannot be told"
            )

    def start(self) -> GpuSampler:
        if self._thread is None:
            self._line_due = self._clock() + self.settings.line_seconds
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        if self.devices is None and not self._open():
            return
        self.sample()
        while not self._stop.wait(self.settings.period):
            if not self.sample():
                return
            now = self._clock()
            if self.settings.line_seconds and now >= self._line_due:
                self._line_due = now + self.settings.line_seconds
                self._print(self.figures().line())

    def _open(self) -> bool:
        """Open the devices through the opener (the NVML probe: bounded, out of this process); False when there
        are none to sample (silently) or NVML did not answer (said once)."""
        from vdk.plugin.ml_training.runtime.nvml_devices import NoDevices

        assert self._opener is not None
        try:
            devices = self._opener()
        except NoDevices:
            return False
        except Exception as e:  # noqa: BLE001 - NVML hangs or crashed in the probe: training goes on
            self.failed = f"{type(e).__name__}: {e}"
            self._warn(f"GPU sampling is off on this node: {e}; training goes on")
            return False
        with self._lock:
            if self._stop.is_set():  # the script ended meanwhile
                _close_quietly(devices)
                return False
            self._attach(devices)
            self._started_at = self._clock()
        return True

    def sample(self) -> bool:
        """Read every device once and add it up; False once sampling has stopped (after an error)."""
        with self._lock:
            if self.failed is not None:
                return False
            try:
                readings = self.devices.read()
            except Exception as e:  # noqa: BLE001 - an NVML error: sampling stops, training goes on
                self._fail(e)
                return False
            now = self._clock()
            seconds = now - self._last_at if self._last_at is not None else 0.0
            self._last_at = now
            steps = self._steps()
            stepped = steps != self._steps_seen
            if stepped:
                if self._first_step is None:
                    self._first_step = self._wall()
                self._last_step = self._wall()
                self._steps_seen = steps
            trained = self._first_step is not None
            sm = [r.sm for r in readings]
            self.tally.add(
                seconds,
                sm,
                [r.occupancy for r in readings],
                [r.memory for r in readings],
                [r.power for r in readings],
                trained,
                stepped,
                now - self._started_at,
            )
            self._sample_cpu(now)
        if self.policy is not None and all(v is not None for v in sm):
            below = all(v < self.policy.percent for v in sm)
            self.policy.observe(now, below, trained, steps)
        return True

    def _steps(self) -> int:
        try:
            return int(self.step_count())
        except Exception:  # noqa: BLE001 - a counter that cannot be read: no step seen
            return self._steps_seen

    def _sample_cpu(self, now: float) -> None:
        if self._cpu is None:
            return
        try:
            read = self._cpu()
        except Exception:  # noqa: BLE001 - no CPU figures, GPU ones as ever
            read = None
        if read is None:
            self._cpu = None
            return
        used, limit = read
        self.cpu_limit = limit
        if self._cpu_first is None:
            self._cpu_first = (now, used)
        self._cpu_last = (now, used)

    def figures(self, final: bool = False) -> GpuFigures:
        """The figures so far (`final`: the node's totals, what was sampled after the last step left out of
        the training window)."""
        tally = self.tally
        with self._lock:
            per_gpu = tuple(s / n if n else None for s, n in tally.per_gpu)
            cpu = None
            if self._cpu_first and self._cpu_last and self._cpu_last[0] > self._cpu_first[0]:
                cpu = (self._cpu_last[1] - self._cpu_first[1]) / (self._cpu_last[0] - self._cpu_first[0])
            return GpuFigures(
                node=self.node,
                gpus=len(self.devices.devices),
                model=self.devices.model,
                profile=self.devices.profile,
                source=self.devices.source,
                seconds=(self._last_at or self._started_at) - self._started_at,
                sm_now=tally.take_period() if not final else tally.last_sm,
                sm_mean=tally.sm_sum / tally.sm_samples if tally.sm_samples else None,
                sm_p95=tally.percentile(0.95),
                occupancy_mean=tally.occupancy_sum / tally.occupancy_samples if tally.occupancy_samples else None,
                sm_gpus=per_gpu if any(v is not None for v in per_gpu) else (),
                mem_peak=tally.mem_peak,
                mem_total=self.devices.memory_total,
                mem_now=tally.mem_last,
                power_w=tally.power_sum / tally.power_samples if tally.power_samples else None,
                busy_gpu_s=tally.busy_gpu_s,
                sampled_gpu_s=tally.sampled_gpu_s,
                window_gpu_s=tally.window_gpu_s,
                idle_gpu_s=tally.idle_gpu_s,
                idle_percent=tally.idle_percent,
                started=self._started_wall,
                first_step=self._first_step,
                last_step=self._last_step,
                steps=self._steps_seen,
                cpu_cores=cpu,
                cpu_limit=self.cpu_limit,
                spark=tally.spark(),
                profiles=tuple(self.devices.profiles),
                final=final,
            )

    def current(self) -> GpuFigures | None:
        """The figures so far for another reader than the GPU lines (runtime/kubeflow_status.py): the SM
        activity of the last sample, and the period of the next GPU line left alone; None before the NVML probe
        found the GPUs (or when it found none)."""
        if self.devices is None:
            return None
        return dataclasses.replace(self.figures(final=True), final=False)

    def _final_line(self) -> str:
        return self.figures(final=True).line()

    def finish(self) -> GpuFigures | None:
        """The script ended: stop, take a last sample, print the node's totals and add them to the container's
        termination message. None when sampling had stopped after an error."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            opening = self.devices is None  # nothing sampled yet: no last sample to wait for (no lock: a read may hang)
            self._thread.join(timeout=0.2 if opening else 5)
            if self._thread.is_alive() and self.devices is None:  # NVML has not answered yet: nothing was sampled
                self._warn("GPU sampling never started: NVML has not answered yet (a driver in trouble)")
                return None
            if self._thread.is_alive():  # an NVML call that hangs (a driver in trouble): the script must still end
                self._warn("GPU sampling did not stop (an NVML call hangs): this node has no GPU totals")
                return None
        if self.devices is None:
            return None
        if self.failed is not None:
            self._close()
            return None
        self.sample()
        figures = self.figures(final=True)
        self._close()
        self._print(figures.line())
        termination.add(figures.line())
        return figures

    def _close(self) -> None:
        _close_quietly(self.devices)

    def _print(self, line: str) -> None:
        self.last_line = line
        try:
            self._out.write(line + "\n")
            self._out.flush()
        except Exception:  # noqa: BLE001 - stdout gone: nothing left to print to
            pass

    def _fail(self, error: Exception) -> None:
        relayed = getattr(error, "nvml_error", None)  # runtime/nvml_probe.py: NVML's error, or the probe's end
        self._stop.set()
        if relayed is None and hasattr(error, "nvml_error"):  # NVML hangs, or crashed in the probe
            self.failed = str(error)
            self._warn(f"GPU sampling stopped: {error}; training goes on")
            return
        self.failed = relayed or f"{type(error).__name__}: {error}"
        self._warn(f"GPU sampling stopped after an NVML error ({self.failed}); training goes on")

    def _warn(self, text: str) -> None:
        try:
            err = self._err or sys.stderr
            err.write(wire.warning(f"{text}") + "\n")
            err.flush()
        except Exception:  # noqa: BLE001 - a warning that cannot be written: sampling goes on
            pass


def _close_quietly(devices: Any) -> None:
    try:
        devices.close()
    except Exception:  # noqa: BLE001 - closing: nothing more to do about it
        pass


def start(
    step_count: Callable[[], int],
    on_idle: Callable[[idle_policy.Idle], None] | None = None,
    settings: SamplerSettings | None = None,
) -> GpuSampler | None:
    """The sampler of this node, started, when this process is its local rank 0, sampling is on, NVML's binding
    is installed and CUDA_VISIBLE_DEVICES shows it a GPU (or is unset); else None, silently. It returns at once:
    the NVML probe (runtime/nvml_probe.py) finds the GPUs in a process of its own while the training starts, and
    a sampler that finds none stays silent."""
    settings = settings or SamplerSettings.from_env()
    for problem in settings.problems:
        sys.stderr.write(wire.warning(f"{problem}: ignored") + "\n")
    if not settings.period or os.environ.get("LOCAL_RANK", "0") != "0" or settings.gpu_count == 0:
        return None
    if importlib.util.find_spec("pynvml") is None:
        return None
    from vdk.plugin.ml_training.runtime import nvml_devices
    from vdk.plugin.ml_training.runtime import nvml_probe

    if nvml_devices.none_shown(os.environ.get("CUDA_VISIBLE_DEVICES")):
        return None  # a process shown no GPU (a CPU run) starts no probe, which a short script would end before

    node = os.environ.get("GROUP_RANK") or os.environ.get("PET_NODE_RANK") or os.environ.get("NODE_RANK") or "0"
    rank = os.environ.get("RANK", "0")
    cpu = container_cpu if os.environ.get("KUBERNETES_SERVICE_HOST") else None
    opener = functools.partial(nvml_probe.open_devices, settings.gpu_count)
    return GpuSampler(settings, None, step_count, node, rank, on_idle, cpu=cpu, opener=opener).start()


# --- the container's CPU (cgroup v2, else v1) --------------------------------------------------------------

_CGROUP = "/sys/fs/cgroup"


def container_cpu(root: str = _CGROUP) -> tuple[float, float | None] | None:
    """(CPU seconds the container used so far, the cores it may use) from its cgroup; None when unreadable."""
    used = _cgroup_usage(root)
    if used is None:
        return None
    return used, _cgroup_limit(root)


def _cgroup_usage(root: str) -> float | None:
    try:
        with open(os.path.join(root, "cpu.stat"), encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpuacct", "cpuacct.usage"), encoding="ascii") as f:
            return int(f.read()) / 1e9
    except (OSError, ValueError):
        return None


def _cgroup_limit(root: str) -> float | None:
    try:
        with open(os.path.join(root, "cpu.max"), encoding="ascii") as f:
            quota, _, period = f.read().strip().partition(" ")
        if quota != "max":
            return int(quota) / int(period or 100000)
    except (OSError, ValueError):
        try:
            with open(os.path.join(root, "cpu", "cpu.cfs_quota_us"), encoding="ascii") as f:
                quota_us = int(f.read())
            with open(os.path.join(root, "cpu", "cpu.cfs_period_us"), encoding="ascii") as f:
                period_us = int(f.read())
            if quota_us > 0:
                return quota_us / period_us
        except (OSError, ValueError):
            pass
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)
