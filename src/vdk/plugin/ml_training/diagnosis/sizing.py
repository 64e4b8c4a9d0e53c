"""Sizing advice: what to change in a job so that its next run uses the GPUs it holds, from the figures its
nodes' GPU samplers left (runtime/gpu_lines.py) and the run's start-up. `vdk show` asks `advise`; each rule
names the change and the figures that show it, and says nothing when the run was well sized:

- `smaller_mig_profile`: the activity and memory peak fit a smaller MIG profile of that GPU model (from NVML,
  else mig_profiles.py's table) -> `gpus_per_node = <profile>`, with the GPU-hours it would have saved;
- `data_loading_bound`: SM activity low while the container's CPUs are busy -> DataLoader `num_workers`, `cpu`;
- `memory_far_below_capacity`: whole GPUs with most of their memory unused -> a larger batch, or fewer GPUs;
- `long_startup`: the start-up took a large part of the run -> its largest part, named (waiting for nodes,
  the image pulled on every node, data and model loaded before the first step), and what to do about it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from vdk.plugin.ml_training.diagnosis import mig_profiles
from vdk.plugin.ml_training.diagnosis.finding import ADVICE
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import NONE
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.nvidia import SLICES

# Below this mean SM activity (percent) a run's GPUs wait for something.
LOW_ACTIVITY = 40.0
# A container whose CPU use is at least this share of its limit is CPU-bound.
BUSY_CPU = 0.85
# Whole GPUs whose memory peak stays under this share of their capacity have room for a larger batch.
LOW_MEMORY = 0.35
# Start-up above this share of the run (and this long) is worth shortening.
LONG_STARTUP_SHARE = 0.15
LONG_STARTUP_SECONDS = 300.0
# Advice to a smaller slice only when it would have saved at least this share of the GPU-hours.
MIN_SAVING = 0.25


@dataclass(frozen=True)
class Startup:
    """From the run's start to its first optimizer step, and its parts where they are known (seconds)."""

    seconds: float
    waiting: float | None = None  # the run's start -> its pods scheduled (a node free, Kueue)
    pulling: float | None = None  # the image pull, as the kubelet reported it (longest of the nodes)
    pulled_nodes: int = 0  # nodes that pulled the image for this run
    loading: float | None = None  # the container's start -> the first step (imports, data, model)
    image_bytes: int | None = None


@dataclass(frozen=True)
class SizingEvidence:
    """What a run's GPUs did, and what the job asked for."""

    nodes: tuple[GpuFigures, ...]  # each node's figures (its totals once it ended)
    gpus_per_node: int
    mig_profile: str | None  # the run's MIG profile, when it ran on slices
    gpu_hours: float  # allocated
    run_seconds: float | None  # start to end (to now while it runs)
    startup: Startup | None = None
    steps_per_s: float | None = None

    @property
    def measured(self) -> tuple[GpuFigures, ...]:
        """The nodes whose activity was readable."""
        return tuple(n for n in self.nodes if n.source != NONE and n.sm_mean is not None)

    def activity(self) -> tuple[float, float] | None:
        """(mean, p95) SM activity over the measured nodes, weighted by the GPU-seconds each sampled."""
        nodes = self.measured
        if not nodes:
            return None
        weights = [max(n.sampled_gpu_s, 1e-9) for n in nodes]
        means = [n.sm_mean for n in nodes if n.sm_mean is not None]  # every node's: they are the measured ones
        mean = sum(m * w for m, w in zip(means, weights, strict=True)) / sum(weights)
        p95 = max(n.sm_p95 if n.sm_p95 is not None else m for n, m in zip(nodes, means, strict=True))
        return mean, p95

    def memory(self) -> tuple[int, int] | None:
        """(the highest peak of any GPU, a GPU's capacity)."""
        nodes = [n for n in self.nodes if n.mem_total]
        if not nodes:
            return None
        return max(n.mem_peak for n in nodes), max(n.mem_total for n in nodes)


SizingRule = Callable[[SizingEvidence], "Finding | None"]


def advise(evidence: SizingEvidence) -> list[Finding]:
    """What to change, one finding per rule that answers (none for a run that used what it held)."""
    out: list[Finding] = []
    for rule in RULES:
        if rule is memory_far_below_capacity and any("gpus_per_node = " in (f.fix or "") for f in out):
            continue  # a smaller slice already answers for the memory
        finding = rule(evidence)
        if finding is not None:
            out.append(finding)
    return out


def smaller_mig_profile(evidence: SizingEvidence) -> Finding | None:
    activity, memory = evidence.activity(), evidence.memory()
    if activity is None or memory is None or not evidence.nodes:
        return None
    if evidence.mig_profile is None and evidence.gpus_per_node != 1:
        return None  # a job takes one slice per node: several whole GPUs are "fewer GPUs" advice
    node = evidence.nodes[0]
    profiles, source = mig_profiles.profiles_of(node.model, node.profiles)
    if not profiles:
        return None
    current = mig_profiles.profile_named(evidence.mig_profile, profiles) if evidence.mig_profile else None
    if evidence.mig_profile and current is None:
        return None
    of_slices = current.slices if current is not None else SLICES
    mean, p95 = activity
    peak, capacity = memory
    fit = mig_profiles.smallest_fit(profiles, p95, peak, of_slices)
    share = current.share if current is not None else 1.0
    if fit is None or fit.share >= share or 1 - fit.share / share < MIN_SAVING:
        return None
    saved = evidence.gpu_hours * (1 - fit.share / share)
    held = f"a {current.name} slice" if current is not None else f"a whole {node.model}"
    return Finding(
        ADVICE,
        f"{held} per node, of which SM activity used {mean:.0f}% on average ({p95:.0f}% at the 95th percentile) "
        f"and memory at most {_gib(peak)} of {_gib(capacity)}: a {fit.name} slice ({fit.slices}/7 of the GPU, "
        f"{_gib(fit.memory)}) would have done",
        f"set `gpus_per_node = {fit.name}` in [ml-training]: it would have saved {saved:.1f} of the run's "
        f"{evidence.gpu_hours:.1f} GPU-hours (profiles: {source})",
    )


def data_loading_bound(evidence: SizingEvidence) -> Finding | None:
    activity = evidence.activity()
    cpu = [(n.cpu_cores, n.cpu_limit) for n in evidence.nodes if n.cpu_cores is not None and n.cpu_limit]
    if activity is None or not cpu or activity[0] >= LOW_ACTIVITY:
        return None
    used, limit = max(cpu, key=lambda c: c[0] / c[1])
    if used / limit < BUSY_CPU:
        return None
    steps = f", {evidence.steps_per_s:.3g} steps/s" if evidence.steps_per_s else ""
    return Finding(
        ADVICE,
        f"data loading bound: SM activity {activity[0]:.0f}% on average while the container used {used:.1f} of "
        f"its {limit:g} CPU cores ({used / limit:.0%}){steps}: the GPUs wait for batches",
        f"raise the DataLoader's `num_workers` and `cpu` in [ml-training] (now {limit:g}) so that batches are ready "
        "when the GPU is; `pin_memory=True` and `persistent_workers=True` help too, and decoding or augmenting once "
        "ahead of training helps most",
    )


def memory_far_below_capacity(evidence: SizingEvidence) -> Finding | None:
    memory = evidence.memory()
    if memory is None or evidence.mig_profile is not None or not evidence.gpus_per_node:
        return None
    peak, capacity = memory
    if not capacity or peak / capacity >= LOW_MEMORY:
        return None
    activity = evidence.activity()
    if activity is not None and activity[0] >= 80:
        return None  # the GPUs are busy: more memory would not make them faster
    larger = max(2, int(capacity * 0.8 // max(peak, 1)))
    fewer = ""
    gpus = evidence.gpus_per_node
    if gpus > 1 and activity is not None:
        wanted = max(1, math.ceil(gpus * max(activity[0] / 100, peak / capacity) / 0.7))
        if wanted < gpus:
            fewer = f", or `gpus_per_node = {wanted}` in [ml-training] (each GPU would then do more of the work)"
    busy = f", SM activity {activity[0]:.0f}% on average" if activity is not None else ""
    return Finding(
        ADVICE,
        f"memory far below capacity: at most {_gib(peak)} of each GPU's {_gib(capacity)} ({peak / capacity:.0%}){busy}",
        f"raise the batch size (about {larger}x fits; scale the learning rate with it){fewer}",
    )


def long_startup(evidence: SizingEvidence) -> Finding | None:
    startup, total = evidence.startup, evidence.run_seconds
    if startup is None or not total or startup.seconds < LONG_STARTUP_SECONDS:
        return None
    if startup.seconds / total < LONG_STARTUP_SHARE:
        return None
    parts = [
        ("waiting", startup.waiting),
        ("pulling", startup.pulling),
        ("loading", startup.loading),
    ]
    known = [(name, seconds) for name, seconds in parts if seconds]
    detail = ", ".join(f"{_PARTS[name]} {approximate_duration(seconds)}" for name, seconds in known)
    what = (
        f"start-up took {approximate_duration(startup.seconds)} of the run's {approximate_duration(total)} "
        f"({startup.seconds / total:.0%}) before the first optimizer step" + (f": {detail}" if detail else "")
    )
    if not known:
        return Finding(ADVICE, what, "look at the run's events and the first lines of its log for what it waited for")
    cause, seconds = max(known, key=lambda p: p[1])
    return Finding(ADVICE, what, _startup_fix(cause, startup))


_PARTS = {"waiting": "waiting for nodes", "pulling": "pulling the image", "loading": "loading before the first step"}


def _startup_fix(cause: str, startup: Startup) -> str:
    if cause == "pulling":
        size = f" ({startup.image_bytes / GIB:.1f} GiB)" if startup.image_bytes else ""
        nodes = f" on {counted(startup.pulled_nodes, 'node')}" if startup.pulled_nodes else ""
        return (
            f"the image{size} was pulled{nodes} for this run: every run on a new node pulls it again. Keep the base "
            "image cached on the GPU nodes (a pre-pull DaemonSet, or nodes with a larger image cache), or choose a "
            "smaller `base_image`; the job's own layers are small"
        )
    if cause == "waiting":
        return (
            "the pods waited for nodes with free GPUs (or for the queue): ask fewer `nodes` or `gpus_per_node`, "
            "or run when the pool is less busy (`vdk list --usage -a` shows who holds it)"
        )
    return (
        "the code loaded its data and model before the first step: the data is read or downloaded anew each run. "
        "Keep it on a claim ([ml-training.mounts]) or preprocess it once, and load only what the first steps need"
    )


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


RULES: tuple[SizingRule, ...] = (smaller_mig_profile, data_loading_bound, memory_far_below_capacity, long_startup)
