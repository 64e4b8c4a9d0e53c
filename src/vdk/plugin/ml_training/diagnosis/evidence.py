"""What a run left, in the one shape every diagnosis reads.

A local run (`vdk run`: processes on this machine) and a cluster run (pods) leave different things, but
the same kinds: ranks that ended (an exit code, a signal, a reason, the Python error they reported, the
stall that stopped them), ranks that wait (a scheduler's message, an image that cannot be pulled), the
rank whose failure came first, and facts of the run as a whole. The adapters bring them into this shape:
`local/outcome.py` (rank outcomes of a local run) and `k8s/runs/cluster_evidence.py` (pod states, events, Kueue's
Workloads). The rules (`diagnosis/rules/`) read only this shape; `local` or `cluster` says where the run
ran, and holds the facts only that place has.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.runtime.protocol import SMOKE
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.source.job_files import Excluded

LOCAL = "local"  # ran on this machine: `vdk run` (or its smoke check before a deploy)
CLUSTER = "cluster"  # ran as pods of a deployed run


@dataclass(frozen=True)
class Ending:
    """How one instance of a rank ended: a process, or a container."""

    exit_code: int | None = None  # as it was reported: a process's -9 locally, a container's 137
    signal: str | None = None  # SIGKILL, SIGSEGV, ... that ended it, when known
    reason: str | None = None  # the container runtime's word: OOMKilled, ContainerCannotRun, StartError, Error
    message: str | None = None  # the container's termination message
    finished_at: str | None = None
    crash: str | None = None  # local: the crash the interpreter reported ("Segmentation fault")
    # local: ended without a word, by a signal no one named (forked ranks: torchrun names the first only)
    unnamed_signal: bool = False


@dataclass(frozen=True)
class RankEvidence:
    """What one rank left: a process of a local run, or the newest pod of a cluster run's rank."""

    rank: str  # "0", "1", ...; helpers by name ("launcher", "dataset-initializer")
    label: str  # how messages name it: "rank 1", "the launcher process"
    index: int | None = None  # its number among the training ranks; None for a helper
    pod: str | None = None  # cluster: its pod
    ended: Ending | None = None  # its (current) instance, once ended
    previous: Ending | None = None  # cluster: the container instance before the last restart
    restarts: int = 0
    # local: the Python error it reported (runtime/report.py: type, message, traceback; `arguments` when
    # the script's argument parser refused them, `virtual_gpu` when the smoke run's virtual GPU raised it)
    error: Mapping[str, Any] | None = None
    log: Path | None = None  # local: its output
    observed: tuple[str, ...] = ()  # local smoke run: what the code did that explains a failure (cpu_shims)
    peak_memory: int | None = None  # local: bytes, as last sampled
    memory_limit: str | None = None  # cluster: its container's memory limit
    # cluster: why it does not run (yet)
    phase: str | None = None  # its pod's phase
    node: str | None = None
    waiting_reason: str | None = None  # its container's: ImagePullBackOff, CreateContainerConfigError, ...
    waiting_message: str | None = None
    unschedulable: str | None = None  # the scheduler's message while the pod cannot be placed
    pod_reason: str | None = None  # Evicted, DeadlineExceeded, Preempted, NodeLost
    pod_message: str | None = None


@dataclass(frozen=True)
class Blame:
    """The rank whose failure came first (the others followed it), as the adapter could tell."""

    rank: RankEvidence
    ending: Ending | None  # the instance that failed (None: a local rank that never ended, say)
    previous: bool = False  # cluster: that instance is the one before the last restart
    stall: Stall | None = None  # the stall watchdog stopped it: how long, where it was


@dataclass(frozen=True)
class Event:
    """An event about a cluster run, its pods or its Kueue Workload (repeats merged)."""

    type: str  # Normal | Warning
    reason: str
    object: str  # Kind/name
    message: str
    count: int
    last_seen: str | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Workload:
    """What Kueue says of a queued run (its Workload's conditions)."""

    name: str | None
    quota_refused: bool = False  # QuotaReserved is False: no quota yet
    quota_message: str | None = None
    quota_reason: str | None = None
    evicted: bool = False  # Evicted is True: it had quota and lost it
    evicted_message: str | None = None
    pending_checks: tuple[str, ...] = ()  # admission checks still Pending


@dataclass(frozen=True)
class LocalFacts:
    """What only a local run has: the job, its plan, where it ran, what the user runs next."""

    spec: MLJobSpec
    mode: str  # protocol.SMOKE or protocol.FULL
    headline: str  # what happened, as the outcome of the run says it (local/outcome.py)
    again: str  # how a fix ends: what to run again once it is applied
    gpus: int = 0  # GPUs the ranks could use (full runs)
    adapted: bool = False  # a full run that asked for the smoke run's CPU stand-ins (VDK_ML_TRAINING_ADAPT_TO_CPU)
    ranks: int = 1  # training processes planned
    smoke_gpus: str = "?"  # smoke runs: virtual GPUs of the node
    timeout_setting: str = "smoke_timeout"
    timed_out: bool = False
    untrained: bool = False  # a smoke run that ended without an optimizer step
    in_image: bool = False  # ran in the job's image (`vdk run --container`)
    engine: str | None = None  # the container engine it ran with (podman, docker), when in the image
    agent_log: Path | None = None  # torchrun's log
    machine_memory: int | None = None  # bytes
    # What the job's image leaves out of a path of the job directory (None: kept); None: the run had no
    # working copy of the job directory (it ran in the image)
    left_out: Callable[[str], Excluded | None] | None = None

    @property
    def stand_ins(self) -> bool:
        """The ranks ran on the CPU stand-ins (virtual GPUs, gloo for NCCL): a smoke run, or an adapted full run."""
        return self.mode == SMOKE or self.adapted


@dataclass(frozen=True)
class ClusterFacts:
    """What only a cluster run has: its phase, its queue, its events."""

    finished: bool = False
    failed: bool = False  # its phase is Failed
    queued: bool = False  # suspended by Kueue until its queue admits it
    expects_pods: bool = False  # Pending or Running: its pods should exist
    message: str | None = None  # the run object's message
    queue: str | None = None
    pods_read: bool = True  # False: its pods could not be read (403), so no ranks says nothing
    events: tuple[Event, ...] = ()
    workloads: tuple[Workload, ...] = ()
    # (who has not created the pods, what to check if that lasts), as the run's backend says it
    no_pods_yet: tuple[str, str] = ("nothing has created them", "if this lasts, look at the run's events")


@dataclass(frozen=True)
class Evidence:
    """What a run left: its ranks, the one to blame for a failure, and the facts of where it ran."""

    ranks: tuple[RankEvidence, ...]
    blame: Blame | None = None
    local: LocalFacts | None = None
    cluster: ClusterFacts | None = None

    @property
    def where(self) -> str:
        return LOCAL if self.local is not None else CLUSTER


def log_tail(path: Path, limit: int = 20000) -> str:
    """The last `limit` bytes of a log a rule reads (torchrun's, the engine's), as text; "" when unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
