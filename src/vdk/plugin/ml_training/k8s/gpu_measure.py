"""A cluster run's GPU figures as the cluster keeps them, and its start-up: each node's totals are the last line
of its container's termination message (runtime/gpu_lines.py), read with the pods that `vdk show` and `vdk list
--usage` list anyway; while the run goes on, node 0's figures so far are in the end of its log, which `vdk show`
reads for the progress already. The start-up comes from the pods' status (scheduled, container started) and
the kubelet's events (the image pulls). No request of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.diagnosis.sizing import Startup
from vdk.plugin.ml_training.k8s.runs.pod_states import RankState
from vdk.plugin.ml_training.runtime.gpu_lines import NONE
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.gpu_lines import parse_gpu_lines

_PULLED = re.compile(r"[Ss]uccessfully pulled image .*? in (?P<took>(?:[\d.]+(?:h|ms|m|s|µs|us|ns))+)")
_IMAGE_SIZE = re.compile(r"Image size: (?P<bytes>\d+) bytes")
_GO_DURATION = re.compile(r"([\d.]+)(h|ms|m|s|µs|us|ns)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPU figures, and where they were read."""

    rank: str
    pod: str
    figures: GpuFigures

    def to_dict(self) -> dict:
        return {"rank": self.rank, "pod": self.pod, **self.figures.to_dict()}


@dataclass(frozen=True)
class RunGpus:
    """The GPU figures of a run's nodes (their totals, or node 0's so far while it runs) and its start-up."""

    nodes: tuple[NodeGpus, ...]
    live: bool = False  # the run goes on: node 0's figures so far

    @property
    def figures(self) -> tuple[GpuFigures, ...]:
        return tuple(n.figures for n in self.nodes)

    @property
    def first_step(self) -> float | None:
        """When the first node took its first optimizer step (Unix seconds)."""
        return min((f.first_step for f in self.figures if f.first_step is not None), default=None)

    @property
    def idle_share(self) -> float | None:
        """Of the GPU time between the first and the last step, the share below the idle threshold."""
        nodes = [f for f in self.figures if f.source != NONE and f.window_gpu_s]
        window = sum(f.window_gpu_s for f in nodes)
        return sum(f.idle_gpu_s for f in nodes) / window if window else None

    def utilisation(self, seconds: float) -> float | None:
        """SM-activity-weighted GPU-seconds over the GPU-seconds the measured nodes held for `seconds`."""
        nodes = [f for f in self.figures if f.source != NONE and f.gpus]
        held = sum(f.gpus for f in nodes) * seconds
        return min(1.0, sum(f.busy_gpu_s for f in nodes) / held) if held > 0 else None

    def to_dict(self) -> dict:
        return {"live": self.live, "nodes": [n.to_dict() for n in self.nodes]}


def run_gpus(ranks: list[RankState], rank0_log: Iterable[str] = ()) -> RunGpus | None:
    """Each node's totals from its termination message (the current container's, else the previous one's);
    while no node has ended, node 0's figures so far from `rank0_log`. None when there are none."""
    nodes = []
    for rank in ranks:
        if rank.index is None:
            continue
        for ended in (rank.terminated, rank.previous):
            figures = _final(ended.message) if ended is not None and ended.message else None
            if figures is not None:
                nodes.append(NodeGpus(rank.rank, rank.pod, figures))
                break
    if nodes:
        return RunGpus(tuple(nodes))
    rank0 = next((r for r in ranks if r.index == 0), None)
    if rank0 is None:
        return None
    live = [f for f in parse_gpu_lines(rank0_log).values()]
    if not live:
        return None
    return RunGpus((NodeGpus(rank0.rank, rank0.pod, live[0]),), live=not live[0].final)


def _final(message: str) -> GpuFigures | None:
    found = parse_gpu_lines(message.splitlines())
    return next((f for f in found.values() if f.final), None)


def startup(
    run_started: str | None,
    first_step: float | None,
    ranks: list[RankState],
    pods: Iterable[dict],
    events: Iterable[Event] = (),
) -> Startup | None:
    """From the run's start to its first optimizer step, with its parts: waiting for nodes (until node 0's pod
    was scheduled), pulling the image (the kubelet's Pulled events: the longest, and on how many nodes), and
    loading (node 0's container started -> the first step)."""
    start = parse_time(run_started)
    if start is None or first_step is None:
        return None
    seconds = max(0.0, first_step - start.timestamp())
    rank0 = next((r.pod for r in ranks if r.index == 0), None)
    node0 = next((p for p in pods if (p.get("metadata") or {}).get("name") == rank0), None)
    scheduled = container_started = None
    if node0 is not None:
        status = node0.get("status") or {}
        condition: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        if str(condition.get("status")) == "True":
            scheduled = parse_time(condition.get("lastTransitionTime"))
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            started = (state.get("running") or state.get("terminated") or {}).get("startedAt")
            container_started = parse_time(started) or container_started
    pulls = [p for p in (_pull(e) for e in events if e.reason == "Pulled") if p is not None]
    return Startup(
        seconds=seconds,
        waiting=max(0.0, (scheduled - start).total_seconds()) if scheduled else None,
        pulling=max((p[0] for p in pulls), default=None),
        pulled_nodes=len(pulls),
        loading=max(0.0, first_step - container_started.timestamp()) if container_started else None,
        image_bytes=max((p[1] for p in pulls if p[1]), default=None),
    )


def _pull(event: Event) -> tuple[float, int | None] | None:
    match = _PULLED.search(event.message)
    if match is None:
        return None
    seconds = sum(float(n) * _UNITS[u] for n, u in _GO_DURATION.findall(match["took"]))
    size = _IMAGE_SIZE.search(event.message)
    return seconds, int(size["bytes"]) if size else None


def parse_time(text: str | None) -> datetime | None:
    """An API server's timestamp (`2026-03-01T09:00:00Z`), in UTC; None when absent or malformed."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None
