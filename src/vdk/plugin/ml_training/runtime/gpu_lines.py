"""GPU lines: what the GPU sampler (runtime/gpu_sampler.py) of a node prints, and their reader.

The local rank 0 of every node prints, at the period of the progress lines, the figures of its node's GPUs
so far, and once more when the script ends (`final=1`); that last line is also added to the container's
termination message (runtime/termination.py), where `vdk show` and `vdk list --usage` read it without a
log request:

    [vdk-ml-training] gpu node=0 gpus=1 model=NVIDIA_H100_80GB_HBM3 source=gpm sm_now=88 sm_mean=71.4
      sm_p95=93 occupancy_mean=41.0 sm_gpus=71.4 mem_peak_gib=31.2 mem_total_gib=79.6 power_w=512 ...

(one line). `source` says what "SM activity" is: `gpm` the share of SMs busy (GPM SM_UTIL, Hopper and
later, MIG slices too), `util` the device utilisation rate (the share of time a kernel ran, older GPUs),
`none` nothing readable (MIG slices of older GPUs: memory only). Values never contain spaces (a model name's
spaces become `_`), so `key=value` tokens split on whitespace; unknown keys are kept and ignored.

Standard library only: the readers (k8s/, diagnosis/, cli/) import this module too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from typing import Any

from vdk.plugin.ml_training.vocabulary import wire

MARK = wire.mark(wire.GPU)
GPM = "gpm"  # GPM SM_UTIL: the share of SMs busy (Hopper and later, MIG slices included)
UTIL = "util"  # nvmlDeviceGetUtilizationRates().gpu: the share of time a kernel ran (a duty cycle)
NONE = "none"  # no activity readable: memory only
SOURCES = {
    GPM: "SM activity (GPM SM_UTIL: the share of SMs busy)",
    UTIL: "device utilisation (the share of time a kernel ran; older GPUs report no SM activity)",
    NONE: "no activity readable (memory only: MIG slices of GPUs without GPM)",
}
GIB = 1 << 30
SPARK_LEVELS = "0123456789"  # a bucket's mean activity in tenths (9: 90% and more); "-": not sampled
SPARK_WIDTH = 40


@dataclass(frozen=True)
class GpuFigures:
    """The figures of one node's GPUs (or MIG slices) over the time they were sampled."""

    node: str = "0"
    gpus: int = 0  # devices sampled
    model: str = ""  # "NVIDIA H100 80GB HBM3" (of the parent GPU for MIG slices)
    profile: str | None = None  # the MIG profile of the slices sampled ("1g.10gb"); None: whole GPUs
    source: str = NONE
    seconds: float = 0.0  # how long it sampled
    sm_now: float | None = None  # percent, the last period's mean over the GPUs
    sm_mean: float | None = None  # percent, over GPUs and time
    sm_p95: float | None = None
    occupancy_mean: float | None = None  # GPM SM_OCCUPANCY: warps active of the maximum (gpm only)
    sm_gpus: tuple[float | None, ...] = ()  # mean of each GPU
    mem_peak: int = 0  # bytes: the highest memory in use on any one GPU
    mem_total: int = 0  # bytes: one GPU's (or slice's) capacity
    mem_now: int = 0  # bytes: the most any one GPU held at the last sample (not in the line: runtime/series.py)
    power_w: float | None = None  # mean draw of one GPU, watts
    busy_gpu_s: float = 0.0  # GPU-seconds weighted by SM activity (the utilisation's numerator)
    sampled_gpu_s: float = 0.0  # GPU-seconds sampled
    window_gpu_s: float = 0.0  # GPU-seconds sampled from the first to the last optimizer step
    idle_gpu_s: float = 0.0  # of those, below the idle threshold
    idle_percent: float = 5.0  # the threshold
    started: float | None = None  # wall clock (Unix seconds) when sampling began
    first_step: float | None = None  # wall clock of this process's first optimizer step
    last_step: float | None = None
    steps: int = 0
    cpu_cores: float | None = None  # cores the container used, on average
    cpu_limit: float | None = None  # cores it may use (its cgroup's quota, else the CPUs it sees)
    spark: str = ""  # SM activity over the time sampled, in tenths per bucket
    profiles: tuple[tuple[str, int, int], ...] = ()  # MIG profiles of the model (name, slices, bytes), per NVML
    final: bool = False  # the script ended: these are the node's totals

    @property
    def mem_share(self) -> float | None:
        """The memory peak as a share of the capacity."""
        return self.mem_peak / self.mem_total if self.mem_total else None

    @property
    def idle_share(self) -> float | None:
        """Of the time between the first and the last step, the share the GPUs sat below the idle threshold."""
        return self.idle_gpu_s / self.window_gpu_s if self.window_gpu_s else None

    @property
    def utilisation(self) -> float | None:
        """SM-activity-weighted GPU-seconds over those sampled (None: no activity readable)."""
        if self.source == NONE or not self.sampled_gpu_s:
            return None
        return self.busy_gpu_s / self.sampled_gpu_s

    @property
    def startup_seconds(self) -> float | None:
        """From the start of sampling (the process) to the first optimizer step."""
        if self.first_step is None or self.started is None:
            return None
        return max(0.0, self.first_step - self.started)

    def line(self) -> str:
        """The GPU line; the reader is `parse_gpu_lines`."""
        parts = [MARK, f"node={self.node}", f"gpus={self.gpus}", f"model={_word(self.model)}"]
        if self.profile:
            parts.append(f"profile={self.profile}")
        parts += [f"source={self.source}", f"seconds={self.seconds:.0f}"]
        for name in ("sm_now", "sm_mean", "sm_p95", "occupancy_mean"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value:.1f}")
        if self.sm_gpus:
            parts.append("sm_gpus=" + ",".join("-" if v is None else f"{v:.1f}" for v in self.sm_gpus))
        parts += [f"mem_peak_gib={self.mem_peak / GIB:.2f}", f"mem_total_gib={self.mem_total / GIB:.2f}"]
        if self.power_w is not None:
            parts.append(f"power_w={self.power_w:.0f}")
        parts += [
            f"busy_gpu_s={self.busy_gpu_s:.0f}",
            f"sampled_gpu_s={self.sampled_gpu_s:.0f}",
            f"window_gpu_s={self.window_gpu_s:.0f}",
            f"idle_gpu_s={self.idle_gpu_s:.0f}",
            f"idle_percent={self.idle_percent:g}",
        ]
        for name in ("started", "first_step", "last_step"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value:.0f}")
        parts.append(f"steps={self.steps}")
        if self.cpu_cores is not None:
            parts.append(f"cpu_cores={self.cpu_cores:.2f}")
        if self.cpu_limit is not None:
            parts.append(f"cpu_limit={self.cpu_limit:g}")
        if self.spark:
            parts.append(f"spark={self.spark}")
        if self.profiles:
            parts.append("profiles=" + ",".join(f"{n}:{s}:{b // (1 << 20)}" for n, s, b in self.profiles))
        if self.final:
            parts.append("final=1")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sm_gpus"] = list(self.sm_gpus)
        out["profiles"] = [{"profile": n, "slices": s, "memory_bytes": b} for n, s, b in self.profiles]
        out["source_meaning"] = SOURCES.get(self.source, self.source)
        out["mem_share"] = _round(self.mem_share)
        out["idle_share"] = _round(self.idle_share)
        out["utilisation"] = _round(self.utilisation)
        out["startup_seconds"] = _round(self.startup_seconds)
        return out


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _word(text: str) -> str:
    return "_".join(text.split()) or "?"


# --- reading them back ---------------------------------------------------------------------------------

_FLOATS = {
    "seconds",
    "sm_now",
    "sm_mean",
    "sm_p95",
    "occupancy_mean",
    "power_w",
    "busy_gpu_s",
    "sampled_gpu_s",
    "window_gpu_s",
    "idle_gpu_s",
    "idle_percent",
    "started",
    "first_step",
    "last_step",
    "cpu_cores",
    "cpu_limit",
}
_KNOWN = {f.name for f in fields(GpuFigures)}


def parse_gpu_line(line: str) -> GpuFigures | None:
    """The figures of one GPU line (anywhere in `line`, after a log prefix), or None when it is not one."""
    tokens = wire.fields(line, wire.GPU)
    if tokens is None:
        return None
    values: dict[str, Any] = {}
    try:
        for name, text in tokens.items():
            if name in _FLOATS:
                number = float(text)
                values[name] = number if math.isfinite(number) else None
            elif name in ("gpus", "steps"):
                values[name] = int(text)
            elif name == "model":
                values[name] = text.replace("_", " ")
            elif name in ("node", "profile", "source", "spark"):
                values[name] = text
            elif name == "final":
                values[name] = text == "1"
            elif name == "sm_gpus":
                values[name] = tuple(None if v == "-" else float(v) for v in text.split(","))
            elif name in ("mem_peak_gib", "mem_total_gib"):
                values[name.removesuffix("_gib")] = int(float(text) * GIB)
            elif name == "profiles":
                values[name] = tuple(_profile(p) for p in text.split(",") if p)
    except ValueError:
        return None
    return GpuFigures(**{k: v for k, v in values.items() if k in _KNOWN})


def _profile(text: str) -> tuple[str, int, int]:
    name, slices, mib = text.split(":")
    return name, int(slices), int(mib) << 20


def parse_gpu_lines(lines: Iterable[str]) -> dict[str, GpuFigures]:
    """The last GPU line of every node in `lines` (a log, or a termination message), by node."""
    out: dict[str, GpuFigures] = {}
    for line in lines:
        figures = parse_gpu_line(line)
        if figures is not None:
            out[figures.node] = figures
    return out


# --- what a sampler adds up -------------------------------------------------------------------------------


@dataclass
class Tally:
    """Running figures of one node's GPUs, fed one reading per sample (the sampler's thread only)."""

    idle_percent: float = 5.0
    histogram: list[int] = field(default_factory=lambda: [0] * 101)  # GPU-samples per whole percent
    sm_sum: float = 0.0
    sm_samples: int = 0
    occupancy_sum: float = 0.0
    occupancy_samples: int = 0
    per_gpu: list[list[float]] = field(default_factory=list)  # [sum, samples] of each GPU
    mem_peak: int = 0
    mem_last: int = 0  # the most any one GPU held at the last sample
    power_sum: float = 0.0
    power_samples: int = 0
    busy_gpu_s: float = 0.0
    sampled_gpu_s: float = 0.0
    window_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    pending: list[float] = field(default_factory=lambda: [0.0, 0.0])  # [GPU-s, idle GPU-s] since the last step
    buckets: list[list[float]] = field(default_factory=list)  # [sum, samples] of each spark bucket
    bucket_seconds: float = 0.0  # seconds per spark bucket (doubles when they are full)
    last_sm: float | None = None
    period_sm: list[float] = field(default_factory=lambda: [0.0, 0.0])  # [sum, samples] since the last line

    def add(self, seconds: float, sm: list[float | None], occupancy: list[float | None], memory: list[int],
            power: list[float | None], trained: bool, stepped: bool, elapsed: float) -> None:  # fmt: skip
        """One sample of every GPU over `seconds`: SM activity (None: not readable), occupancy, bytes in use,
        watts. `trained`: the first optimizer step was taken; `stepped`: a step since the last sample."""
        if len(self.per_gpu) < len(sm):
            self.per_gpu += [[0.0, 0] for _ in range(len(sm) - len(self.per_gpu))]
        self.sampled_gpu_s += seconds * len(sm)
        if stepped:  # what was waiting since the last step was training time after all
            self.window_gpu_s += self.pending[0]
            self.idle_gpu_s += self.pending[1]
            self.pending = [0.0, 0.0]
        readable = [v for v in sm if v is not None]
        for i, value in enumerate(sm):
            if value is None:
                continue
            value = min(100.0, max(0.0, value))
            self.histogram[int(round(value))] += 1
            self.sm_sum += value
            self.sm_samples += 1
            self.per_gpu[i][0] += value
            self.per_gpu[i][1] += 1
            self.busy_gpu_s += seconds * value / 100
            if trained:
                self.pending[0] += seconds
                if value < self.idle_percent:
                    self.pending[1] += seconds
        for value in occupancy:
            if value is not None:
                self.occupancy_sum += value
                self.occupancy_samples += 1
        self.mem_peak = max([self.mem_peak, *memory])
        self.mem_last = max(memory, default=0)
        for value in power:
            if value is not None:
                self.power_sum += value
                self.power_samples += 1
        if readable:
            mean = sum(readable) / len(readable)
            self.last_sm = mean
            self.period_sm[0] += mean
            self.period_sm[1] += 1
            self._spark(elapsed, mean)

    def _spark(self, elapsed: float, value: float) -> None:
        if not self.bucket_seconds:
            self.bucket_seconds = 60.0
        index = int(elapsed // self.bucket_seconds)
        while index >= SPARK_WIDTH:  # full: every two buckets become one of twice the span
            self.buckets = [_merge(self.buckets[i : i + 2]) for i in range(0, len(self.buckets), 2)]
            self.bucket_seconds *= 2
            index = int(elapsed // self.bucket_seconds)
        while len(self.buckets) <= index:
            self.buckets.append([0.0, 0])
        self.buckets[index][0] += value
        self.buckets[index][1] += 1

    def spark(self) -> str:
        return "".join(
            SPARK_LEVELS[min(9, int(s / n // 10))] if n else "-" for s, n in (tuple(b) for b in self.buckets)
        )

    def percentile(self, share: float) -> float | None:
        total = sum(self.histogram)
        if not total:
            return None
        wanted, seen = share * total, 0
        for percent, count in enumerate(self.histogram):
            seen += count
            if seen >= wanted:
                return float(percent)
        return 100.0

    def take_period(self) -> float | None:
        """The mean SM activity since the last call (the last line)."""
        total, count = self.period_sm
        self.period_sm = [0.0, 0.0]
        return total / count if count else self.last_sm


def _merge(pair: list[list[float]]) -> list[float]:
    return [sum(b[0] for b in pair), sum(b[1] for b in pair)]
