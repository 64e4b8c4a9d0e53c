"""The GPU sampler's readings beside `nvidia-smi`'s at the same moments, and whether they agree within the
stated tolerance.

`nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -lms 200`
prints one line per reading with its own timestamp (its output may come in chunks through a pipe, so the
timestamp is the line's, not the time it was read); `nvidia-smi dmon --gpm-metrics 2` prints GPM's SM activity,
the figure the sampler reads on Hopper (source `gpm`), once a second. Each sampler reading is paired with the
nvidia-smi reading nearest in time; readings near a change of phase (the training starting or stopping) are
left out, where two clocks a fraction of a second apart see different worlds.

The tolerances:
- memory in use: within `MEMORY_TOLERANCE` of each other (the same NVML counter; the driver's own reserve may
  be counted on one side only);
- SM activity, source `util` (NVML's utilisation rate, nvidia-smi's `utilization.gpu`): within
  `ACTIVITY_POINTS` percentage points;
- SM activity, source `gpm`: within `ACTIVITY_POINTS` of dmon's GPM SM activity where dmon gives it, and never
  more than `ACTIVITY_POINTS` above `utilization.gpu` (SM activity is at most the time a kernel ran).

Pure, but for `Poller`, which runs nvidia-smi in the background.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import Any

MIB = 1024 * 1024
MEMORY_TOLERANCE = 512 * MIB
ACTIVITY_POINTS = 10.0
PAIR_SECONDS = 0.6  # a sampler reading and an nvidia-smi one further apart than this are not paired
DMON_PAIR_SECONDS = 1.1  # dmon's times have whole seconds
EDGE_SECONDS = 1.5  # readings this close to a change of phase are left out

QUERY = [
    "nvidia-smi",
    "--query-gpu=timestamp,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
    "-lms",
    "200",
]
DMON = ["nvidia-smi", "dmon", "-s", "u", "--gpm-metrics", "2", "-d", "1", "-o", "DT"]


@dataclass(frozen=True)
class SmiReading:
    at: float  # Unix seconds
    util: float | None = None  # utilization.gpu, percent
    memory: int | None = None  # bytes in use
    sm_activity: float | None = None  # dmon's GPM SM activity, percent


@dataclass(frozen=True)
class SamplerReading:
    at: float  # Unix seconds when the sampler read it
    sm: float | None
    memory: int


@dataclass
class Comparison:
    """The paired readings' differences, and the verdict against the tolerances."""

    source: str  # the sampler's: gpm, util or none
    pairs: int = 0
    memory_max_error: int | None = None  # bytes
    memory_mean_error: float | None = None
    activity_against: str = ""  # what the sampler's SM figure was compared with
    activity_pairs: int = 0
    activity_max_error: float | None = None  # percentage points
    activity_mean_error: float | None = None
    above_util: float | None = None  # gpm: the most the sampler's SM activity was above utilization.gpu
    busy_sampler: float | None = None  # the busy phase's means: the sampler's SM figure, utilization.gpu
    busy_smi: float | None = None
    idle_sampler: float | None = None
    idle_smi: float | None = None
    peak_sampler: int | None = None
    peak_smi: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def within_tolerance(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "within_tolerance": self.within_tolerance, "tolerance": tolerance_text()}


def tolerance_text() -> str:
    return (
        f"memory within {MEMORY_TOLERANCE // MIB} MiB; SM activity within {ACTIVITY_POINTS:g} points of the same "
        f"figure on nvidia-smi (utilization.gpu for source util, dmon's GPM SM activity for gpm), and for gpm never "
        f"more than {ACTIVITY_POINTS:g} points above utilization.gpu"
    )


def parse_query_line(line: str) -> SmiReading | None:
    """One line of QUERY's output: `2026/11/04 12:34:56.789, 97, 40312, 143771`; None for anything else."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3:
        return None
    at = _timestamp(parts[0])
    if at is None:
        return None
    return SmiReading(at, util=_number(parts[1]), memory=_mib(parts[2]))


def _timestamp(text: str) -> float | None:
    """nvidia-smi's local time `YYYY/MM/DD HH:MM:SS.mmm` as Unix seconds."""
    text = text.strip()
    whole, _, fraction = text.partition(".")
    try:
        base = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S"))
        return base + (float("0." + fraction) if fraction.isdigit() else 0.0)
    except ValueError:
        return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _mib(text: str) -> int | None:
    value = _number(text)
    return int(value * MIB) if value is not None else None


def parse_dmon(lines: Iterable[str]) -> list[SmiReading]:
    """dmon's table: `#Date Time gpu sm mem ... smAct` headers (names, then units), then rows of whitespace-
    separated values; the GPM SM activity is the column whose name says SM activity (its name differs between
    drivers: `smAct`, `gpm:smAct`, ...). Rows without a readable time or value are left out."""
    names: list[str] | None = None
    out = []
    for line in lines:
        if line.startswith("#"):
            if names is None:
                names = [n.lower() for n in line.lstrip("#").split()]
            continue
        if names is None:
            continue
        values = line.split()
        if len(values) != len(names):
            continue
        row = dict(zip(names, values, strict=True))
        column = next((n for n in names if "sm" in n and "act" in n), None)
        at = _dmon_time(row.get("date", ""), row.get("time", ""))
        if column is None or at is None:
            continue
        activity = _number(row[column])
        if activity is not None:
            out.append(SmiReading(at, sm_activity=activity))
    return out


def _dmon_time(date: str, clock: str) -> float | None:
    try:
        return time.mktime(time.strptime(f"{date} {clock}", "%Y%m%d %H:%M:%S"))
    except ValueError:
        return None


def _nearest(at: float, readings: list[SmiReading], within: float) -> SmiReading | None:
    best = min(readings, key=lambda r: abs(r.at - at), default=None)
    return best if best is not None and abs(best.at - at) <= within else None


def _steady(at: float, edges: list[float]) -> bool:
    return all(abs(at - edge) > EDGE_SECONDS for edge in edges)


def _in(at: float, phase: tuple[float, float] | None) -> bool:
    return phase is not None and phase[0] + EDGE_SECONDS < at < phase[1] - EDGE_SECONDS


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def compare(
    source: str,
    sampler: list[SamplerReading],
    query: list[SmiReading],
    dmon: list[SmiReading] = (),  # type: ignore[assignment]
    busy: tuple[float, float] | None = None,
    idle: tuple[float, float] | None = None,
) -> Comparison:
    """Pair each sampler reading with nvidia-smi's nearest; `busy` and `idle`: the phases (Unix seconds) of
    the load, whose edges are left out and whose means are reported."""
    edges = [t for phase in (busy, idle) if phase for t in phase]
    result = Comparison(source)
    memory_errors: list[int] = []
    activity_errors: list[float] = []
    above: list[float] = []
    sides: dict[str, list[float]] = {"busy_s": [], "busy_n": [], "idle_s": [], "idle_n": []}
    for reading in sampler:
        if not _steady(reading.at, edges):
            continue
        smi = _nearest(reading.at, list(query), PAIR_SECONDS)
        if smi is None:
            continue
        result.pairs += 1
        if smi.memory is not None:
            memory_errors.append(abs(reading.memory - smi.memory))
        if reading.sm is None:
            continue
        if source == "gpm":
            gpm = _nearest(reading.at, list(dmon), DMON_PAIR_SECONDS)
            other = gpm.sm_activity if gpm is not None else None
            if smi.util is not None:
                above.append(reading.sm - smi.util)
        else:
            other = smi.util
        for name, phase in (("busy", busy), ("idle", idle)):
            if smi.util is not None and _in(reading.at, phase):
                sides[f"{name}_s"].append(reading.sm)
                sides[f"{name}_n"].append(smi.util)
        if other is not None:
            activity_errors.append(abs(reading.sm - other))
    result.activity_against = (
        ("dmon GPM SM activity" if dmon else "nothing: dmon gave no GPM SM activity")
        if source == "gpm"
        else "utilization.gpu"
    )
    if memory_errors:
        result.memory_max_error = max(memory_errors)
        result.memory_mean_error = sum(memory_errors) / len(memory_errors)
    if activity_errors:
        result.activity_pairs = len(activity_errors)
        result.activity_max_error = max(activity_errors)
        result.activity_mean_error = sum(activity_errors) / len(activity_errors)
    if above:
        result.above_util = max(above)
    result.busy_sampler, result.busy_smi = _mean(sides["busy_s"]), _mean(sides["busy_n"])
    result.idle_sampler, result.idle_smi = _mean(sides["idle_s"]), _mean(sides["idle_n"])
    result.peak_sampler = max((r.memory for r in sampler), default=None)
    result.peak_smi = max((r.memory for r in query if r.memory is not None), default=None)
    result.problems = _problems(result)
    return result


def _problems(c: Comparison) -> list[str]:
    problems = []
    if not c.pairs:
        problems.append("no sampler reading had an nvidia-smi reading within its pairing window")
    if c.memory_max_error is not None and c.memory_max_error > MEMORY_TOLERANCE:
        problems.append(f"memory differs by up to {c.memory_max_error / MIB:.0f} MiB")
    if c.peak_sampler is not None and c.peak_smi is not None and abs(c.peak_sampler - c.peak_smi) > MEMORY_TOLERANCE:
        problems.append(f"memory peaks differ: {c.peak_sampler / MIB:.0f} vs {c.peak_smi / MIB:.0f} MiB")
    if c.activity_max_error is not None and c.activity_max_error > ACTIVITY_POINTS:
        problems.append(f"SM activity differs from {c.activity_against} by up to {c.activity_max_error:.1f} points")
    if c.source != "gpm" and c.source != "none" and not c.activity_pairs:
        problems.append("no SM activity reading to compare")
    if c.above_util is not None and c.above_util > ACTIVITY_POINTS:
        problems.append(f"GPM SM activity up to {c.above_util:.1f} points above utilization.gpu")
    return problems


class Poller:
    """`command` (QUERY or DMON) in the background; `lines()` what it printed so far. Never fails: a command
    that cannot run leaves `error` set and no lines."""

    def __init__(self, command: list[str]):
        self.command = command
        self._lines: list[str] = []
        self.error: str | None = None
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Poller:
        # line-buffered where stdbuf can make it so: a stopped nvidia-smi would take its buffered lines with it
        command = ["stdbuf", "-oL", *self.command] if shutil.which("stdbuf") else self.command
        try:
            self._process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
        except OSError as e:
            self.error = f"{self.command[0]}: {e}"
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.append(line.rstrip("\n"))

    def stop(self) -> list[str]:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._process is not None and self._process.returncode not in (0, -15, None) and not self._lines:
            self.error = f"{' '.join(self.command)} exited with {self._process.returncode}"
        return list(self._lines)
