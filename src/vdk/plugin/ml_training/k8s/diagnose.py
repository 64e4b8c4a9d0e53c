"""Why a run is where it is, from the objects read from the cluster (dicts in, dataclasses out):
the state of every rank's pod, why the run waits (scheduling, image pulls, Kueue), why it failed
(a rank the stall watchdog stopped, OOMKilled, exit codes and signals, well-known errors in the log)
and how far training got.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import NamedTuple

from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s import run_summary
from vdk.plugin.ml_training.k8s.backends.base import completion_index_rank
from vdk.plugin.ml_training.k8s.run_summary import RunSummary
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import parse_stall

PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONFIG_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
SIGTERM_EXIT = 128 + signal.SIGTERM


class Fix(NamedTuple):
    """What to do (`advice`) when a message matches `pattern` (a regular expression)."""

    pattern: str
    advice: str


@dataclass(frozen=True)
class Termination:
    """How a container instance ended."""

    exit_code: int | None
    reason: str | None  # OOMKilled, Error, Completed, ContainerCannotRun, ...
    message: str | None
    finished_at: str | None

    @property
    def failed(self) -> bool:
        return self.reason == "OOMKilled" or (self.exit_code or 0) != 0

    @property
    def signal(self) -> str | None:
        """SIGKILL for exit code 137, ...: the shell convention 128 + signal number."""
        code = self.exit_code or 0
        if 128 < code < 128 + 65:
            try:
                return signal.Signals(code - 128).name
            except ValueError:
                return f"signal {code - 128}"
        return None

    def describe(self) -> str:
        if self.reason == "OOMKilled":
            return f"OOMKilled (exit code {self.exit_code})"
        reason = self.reason if self.reason not in (None, "Error", "Completed") else None
        extra = ", ".join(x for x in (reason, self.signal) if x)
        return f"exited with code {self.exit_code}" + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class RankState:
    """The newest pod of one rank (node rank, or the name of a helper job such as an initializer)."""

    rank: str
    index: int | None
    pod: str
    container: str
    phase: str  # the pod's phase
    node: str | None
    ready: bool
    restarts: int
    waiting_reason: str | None = None
    waiting_message: str | None = None
    terminated: Termination | None = None
    previous: Termination | None = None  # the instance before the last restart
    unschedulable: str | None = None  # the scheduler's message while the pod cannot be placed
    pod_reason: str | None = None  # Evicted, DeadlineExceeded, ...
    pod_message: str | None = None
    memory_limit: str | None = None
    created: str | None = None
    attempts: int = 1  # pods created for this rank (a Job replaces lost pods)

    @property
    def state(self) -> str:
        """One line for a table."""
        if self.terminated is not None:
            return "succeeded" if not self.terminated.failed else self.terminated.describe()
        if self.waiting_reason:
            return f"waiting: {self.waiting_reason}"
        if self.unschedulable is not None:
            return "unschedulable"
        if self.pod_reason:
            return self.pod_reason
        if self.phase == "Running":
            return "running" if self.ready or self.restarts == 0 else "running (not ready)"
        if self.phase == "Pending":
            return "not scheduled yet" if not self.node else "starting"
        return self.phase.lower()

    @property
    def started(self) -> bool:
        """Whether the container has produced a log (current or previous instance)."""
        return (
            self.phase in ("Running", "Succeeded", "Failed") or self.terminated is not None or self.previous is not None
        )

    @property
    def streamable(self) -> bool:
        """Whether its current container has a log to read (not waiting to start or restart)."""
        return self.phase in ("Running", "Succeeded", "Failed") and not self.waiting_reason

    def to_dict(self) -> dict:
        out = asdict(self)
        out["state"] = self.state
        return out


@dataclass
class Finding:
    """Something a user must know: why the run waits (`waiting`) or why it failed (`failed`)."""

    kind: str  # "waiting" | "failed"
    what: str
    fix: str | None = None
    ranks: list[str] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    log_source: str | None = None  # "rank 1, pod x, previous container"
    hints: list[str] = field(default_factory=list)  # what well-known errors in the log mean
    stall: Stall | None = None  # the rank the stall watchdog stopped: how long, where it was

    def to_dict(self) -> dict:
        out = asdict(self)
        out["stall"] = self.stall.to_dict() if self.stall is not None else None
        return out


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    object: str  # Kind/name
    message: str
    count: int
    last_seen: str | None

    def to_dict(self) -> dict:
        return asdict(self)


# --- ranks ---------------------------------------------------------------------------------------


def rank_of(pod: dict, backend: str | None) -> tuple[int | None, str]:
    """(node rank, label) of a training pod, as its backend labels it; (None, a name) for helper pods."""
    known = backends.find(backend)
    return known.rank_of(pod) if known is not None else completion_index_rank(pod)


def rank_states(pods: Iterable[dict], backend: str | None) -> list[RankState]:
    """One state per rank, from its newest pod, ordered by rank (helper pods last)."""
    by_rank: dict[str, list[dict]] = {}
    for pod in pods:
        by_rank.setdefault(rank_of(pod, backend)[1], []).append(pod)
    states = []
    for group in by_rank.values():
        group.sort(key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
        states.append(pod_state(group[0], backend, attempts=len(group)))
    return sorted(states, key=lambda s: (s.index is None, s.index if s.index is not None else 0, s.rank))


def pod_state(pod: dict, backend: str | None, attempts: int = 1) -> RankState:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    index, rank = rank_of(pod, backend)
    known = backends.find(backend)
    wanted = known.container if known is not None else ""
    containers = spec.get("containers") or [{}]
    container = next((c for c in containers if c.get("name") == wanted), containers[0])
    name = container.get("name") or wanted
    cstatus = next((c for c in status.get("containerStatuses") or [] if c.get("name") == name), {})
    state = cstatus.get("state") or {}
    waiting = state.get("waiting") or {}
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    unschedulable = None
    if str(scheduled.get("status")) == "False":
        unschedulable = scheduled.get("message") or scheduled.get("reason") or "not scheduled"
    return RankState(
        rank=rank,
        index=index,
        pod=metadata.get("name", "?"),
        container=name,
        phase=status.get("phase") or "Pending",
        node=spec.get("nodeName"),
        ready=bool(cstatus.get("ready")),
        restarts=int(cstatus.get("restartCount") or 0),
        waiting_reason=waiting.get("reason"),
        waiting_message=waiting.get("message"),
        terminated=_termination(state.get("terminated")),
        previous=_termination((cstatus.get("lastState") or {}).get("terminated")),
        unschedulable=unschedulable,
        pod_reason=status.get("reason"),
        pod_message=status.get("message"),
        memory_limit=((container.get("resources") or {}).get("limits") or {}).get("memory"),
        created=metadata.get("creationTimestamp"),
        attempts=attempts,
    )


def _termination(terminated: dict | None) -> Termination | None:
    if not terminated:
        return None
    return Termination(
        exit_code=_int(terminated.get("exitCode")),
        reason=terminated.get("reason"),
        message=(terminated.get("message") or "").strip() or None,
        finished_at=terminated.get("finishedAt"),
    )


def effective_phase(phase: str, ranks: list[RankState]) -> str:
    """The run's phase, made honest: an operator reports Running while ranks still cannot start."""
    if phase in (run_summary.RUNNING, run_summary.PENDING, run_summary.RESTARTING) and any(
        r.phase == "Pending" for r in ranks if r.index is not None
    ):
        return run_summary.PENDING
    return phase


# --- events --------------------------------------------------------------------------------------


def run_events(events: Iterable[dict], run_name: str) -> list[Event]:
    """Events about the run, its pods and Kueue's Workload (all named after the run), oldest
    first, repeated messages merged."""
    merged: dict[tuple, Event] = {}
    for e in events:
        involved = e.get("involvedObject") or e.get("regarding") or {}
        if run_name not in (involved.get("name") or ""):
            continue
        last = e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp")
        count = int(e.get("count") or (e.get("series") or {}).get("count") or 1)
        key = (involved.get("kind"), involved.get("name"), e.get("reason"), e.get("message") or e.get("note"))
        earlier = merged.get(key)
        merged[key] = Event(
            type=e.get("type") or "Normal",
            reason=e.get("reason") or "",
            object=f"{involved.get('kind', '?')}/{involved.get('name', '?')}",
            message=(e.get("message") or e.get("note") or "").strip(),
            count=count + (earlier.count if earlier else 0),
            last_seen=max(filter(None, [last, earlier.last_seen if earlier else None]), default=None),
        )
    return sorted(merged.values(), key=lambda ev: ev.last_seen or "")


# --- why it waits --------------------------------------------------------------------------------

# Scheduler message fragments -> what to do.
_SCHEDULING_FIXES = (
    Fix(
        r"Insufficient (nvidia\.com/(gpu|mig-\S+)|amd\.com/gpu)",
        "no node has that many free GPUs now: wait for running jobs to end, "
        "ask for fewer (`gpus_per_node`, `nodes` in [ml-training]) or ask your cluster admin for GPU capacity",
    ),
    Fix(
        r"Insufficient memory",
        "no node has that much free memory: lower `memory` in [ml-training] (or wait for capacity)",
    ),
    Fix(
        r"Insufficient cpu",
        "no node has that many free CPUs: lower `cpu` in [ml-training] (or wait for capacity)",
    ),
    Fix(
        r"Insufficient ephemeral-storage",
        "no node has enough free disk: the image or /dev/shm may be too large",
    ),
    Fix(
        r"untolerated taint",
        "the nodes with room are reserved (tainted) for other workloads: "
        "ask your cluster admin which node pool ML jobs may use",
    ),
    Fix(
        r"didn't match Pod's node affinity/selector",
        "no node matches the pod's node selector: ask your cluster admin for the node labels of the GPU pool",
    ),
    Fix(
        r"exceeded quota",
        "the namespace's ResourceQuota is used up: wait for other runs to end, or ask for a larger quota",
    ),
    Fix(
        r"didn't trigger scale-up|max node group size reached",
        "the cluster autoscaler cannot add a node that fits: the request is larger than any node type it has",
    ),
    Fix(
        r"persistentvolumeclaim",
        "a volume the pod needs is not available",
    ),
)
# Image pull message fragments -> what to do.
_PULL_FIXES = (
    Fix(
        r"unauthorized|authentication required|401|403|denied|forbidden",
        "the cluster's nodes may not pull from the registry: "
        "create an image pull secret (`kubectl create secret docker-registry`) "
        "and add it to the namespace's default service account (`imagePullSecrets`)",
    ),
    Fix(
        r"not found|manifest unknown|404",
        "the image is not in the registry (deleted, or pushed elsewhere): deploy again",
    ),
    Fix(
        r"no such host|i/o timeout|connection refused|dial tcp|tls|x509|certificate",
        "the nodes cannot reach the registry: it must be reachable from inside the cluster (not localhost) "
        "with a certificate the nodes trust",
    ),
)


def why_waiting(
    run: RunSummary, ranks: list[RankState], events: list[Event], workloads: list[dict], pods_read: bool = True
) -> list[Finding]:
    """Why a run that has not finished is not (fully) running yet. `pods_read`: False when its pods could not be
    read (403), so that no ranks says nothing about whether there are pods."""
    if run.finished:
        return []
    findings = []
    queued = _kueue_finding(run, workloads, events)
    if queued:
        findings.append(queued)
    training = [r for r in ranks if r.index is not None] or ranks
    groups: dict[tuple[str, str | None], list[RankState]] = {}
    for r in training:
        reason = _waiting_reason(r)
        if reason:
            groups.setdefault(reason, []).append(r)
    for (what, fix), group in groups.items():
        findings.append(Finding("waiting", f"{_ranks_text(group)}: {what}", fix, [g.rank for g in group]))
    if not ranks and pods_read and not queued and run.phase in (run_summary.PENDING, run_summary.RUNNING):
        warnings = [e for e in events if e.type == "Warning"]
        if warnings:
            last = warnings[-1]
            findings.append(
                Finding(
                    "waiting",
                    f"no pods yet: {last.object}: {last.reason}: {last.message}",
                    _fix_for(last.message, _SCHEDULING_FIXES),
                )
            )
        else:
            backend = backends.find(run.backend)
            who, fix = (
                backend.no_pods_yet(run.name, run.namespace)
                if backend is not None
                else ("nothing has created them", "if this lasts, look at the run's events")
            )
            findings.append(Finding("waiting", f"no pods yet: {who}", fix))
    return findings


def rank_explanation(r: RankState) -> str:
    """Why a rank has no log (yet), in one line."""
    if r.waiting_reason == "CrashLoopBackOff" and r.previous is not None:
        return f"restarting after a crash: it {r.previous.describe()} (restarted {r.restarts} times)"
    reason = _waiting_reason(r)
    if reason:
        what, fix = reason
        return what + (f" — {fix}" if fix else "")
    if r.phase == "Pending":
        return "waiting to be scheduled" if not r.node else f"starting on {r.node}"
    return r.state


def _waiting_reason(r: RankState) -> tuple[str, str | None] | None:
    if r.unschedulable is not None:
        return f"cannot be scheduled: {r.unschedulable}", _fix_for(r.unschedulable, _SCHEDULING_FIXES)
    if r.waiting_reason in PULL_FAILURES:
        message = r.waiting_message or r.waiting_reason
        return f"cannot pull the image ({r.waiting_reason}): {message}", _fix_for(
            message, _PULL_FIXES
        ) or "check that the cluster can pull the image"
    if r.waiting_reason in CONFIG_FAILURES:
        return f"cannot start its container ({r.waiting_reason}): {r.waiting_message or ''}".rstrip(
            ": "
        ), "a Secret, ConfigMap or volume it needs is missing, or the image has no such command"
    if r.phase == "Pending" and r.node and r.waiting_reason == "ContainerCreating":
        return f"starting on {r.node} (pulling the image or mounting volumes)", None
    return None


def _kueue_finding(run: RunSummary, workloads: list[dict], events: list[Event]) -> Finding | None:
    """Kueue holds a queued run's object suspended until its ClusterQueue has quota for it."""
    for workload in workloads:
        conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
        evicted = conditions.get("Evicted")
        reserved = conditions.get("QuotaReserved")
        name = (workload.get("metadata") or {}).get("name")
        if reserved and str(reserved.get("status")) == "False":
            lead = f"queued in {run.queue or 'its queue'} (Kueue Workload {name})"
            if evicted and str(evicted.get("status")) == "True":
                lead += f", after being evicted: {evicted.get('message')}"
            return Finding(
                "waiting",
                f"{lead}: {reserved.get('message') or reserved.get('reason')}",
                _queue_fix(reserved.get("message") or ""),
            )
        checks = [c for c in (workload.get("status") or {}).get("admissionChecks") or [] if c.get("state") == "Pending"]
        if checks:
            names = ", ".join(c.get("name", "?") for c in checks)
            return Finding("waiting", f"quota reserved in Kueue; waiting for the admission check(s) {names}", None)
    if run.phase == run_summary.QUEUED:
        pending = [e for e in events if e.object.startswith("Workload/") and e.reason in ("Pending", "Inadmissible")]
        if pending:
            return Finding("waiting", f"queued in {run.queue}: {pending[-1].message}", _queue_fix(pending[-1].message))
        return Finding(
            "waiting",
            f"queued in {run.queue}: Kueue has not admitted it yet",
            "its queue is busy or not yet attempted; `kubectl get workloads` shows the queue",
        )
    return None


def _queue_fix(message: str) -> str:
    if "doesn't exist" in message or "is inactive" in message or "not found" in message:
        return "set `queue` in [ml-training] to a LocalQueue of this namespace (`kubectl get localqueues`)"
    return (
        "the queue's quota is in use by other workloads: "
        "it starts when quota frees up (or lower `nodes` / `gpus_per_node`)"
    )


# --- why it failed -------------------------------------------------------------------------------

# Well-known failures in the last lines of a rank's log -> what to do.
LOG_HINTS = (
    Fix(
        r"CUDA out of memory|OutOfMemoryError",
        "the GPU ran out of memory: lower the per-device batch size, use gradient accumulation or mixed precision",
    ),
    Fix(
        r"exitcode\s*:\s*-9|Signals\.SIGKILL|signal 9",
        "a training process was killed (SIGKILL): most often it ran out of host memory; "
        "raise `memory` in [ml-training]",
    ),
    Fix(
        r"Bus error|No space left on device.*shm|unable to (write to|allocate shared memory)",
        "/dev/shm is too small for the data loader: "
        "raise `shm_size` in [ml-training] (or use fewer DataLoader workers)",
    ),
    Fix(
        r"NCCL (error|WARN)|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|NCCL communicator was aborted",
        "NCCL communication between ranks failed: "
        "set NCCL_DEBUG=INFO in [ml-training.env] and look at the first rank that failed",
    ),
    Fix(
        r"RendezvousTimeoutError|RendezvousClosedError|DistNetworkError|timed out.*rendezvous|Timed out waiting for",
        "not all ranks joined in time: some pods could not start or reach rank 0 (see why the others waited)",
    ),
    Fix(
        r"ModuleNotFoundError: No module named '([^']+)'",
        "a module is missing from the image: add the package to the job's requirements.txt and deploy again",
    ),
)


def why_failed(run: RunSummary, ranks: list[RankState]) -> Finding | None:
    """The first failure of a failed (or failing) run: a rank the stall watchdog stopped, else the rank
    whose container died first."""
    stalled = stalled_rank(ranks)
    if stalled is not None:
        return stall_finding(*stalled)
    culprit = failing_rank(ranks)
    if culprit is not None:
        rank, termination, previous = culprit
        what, fix = termination_meaning(termination, rank.memory_limit)
        restarted = f" (restarted {rank.restarts} times)" if rank.restarts else ""
        return Finding(
            "failed",
            f"rank {rank.rank} (pod {rank.pod}) {what}{restarted}",
            fix,
            [rank.rank],
            log_source=f"rank {rank.rank}, pod {rank.pod}" + (", previous container" if previous else ""),
        )
    evicted = next((r for r in ranks if r.pod_reason in ("Evicted", "DeadlineExceeded", "Preempted", "NodeLost")), None)
    if evicted is not None:
        return Finding(
            "failed",
            f"rank {evicted.rank} (pod {evicted.pod}) was {evicted.pod_reason}: {evicted.pod_message or ''}".rstrip(
                ": "
            ),
            "the node ran out of a resource or the pod was preempted: "
            "deploy again, and raise `memory` if the node was low on memory",
            [evicted.rank],
        )
    if run.phase != run_summary.FAILED:
        return None
    message = run.message or "the run failed"
    fix = None
    if "DeadlineExceeded" in message or "deadline" in message.lower():
        fix = "it ran longer than `max_runtime` of [ml-training]: raise it, or make training resume from a checkpoint"
    elif not ranks:
        fix = "its pods are gone (cleaned up after the failure), and their logs with them"
    return Finding("failed", message, fix)


def stalled_rank(ranks: list[RankState]) -> tuple[RankState, Stall, bool] | None:
    """(rank, its stall, whether in the previous container) of a container whose termination message
    says the stall watchdog stopped one of its processes: the first stall not inside a collective (the
    ranks waiting for it stall later), else the first."""
    candidates = []
    for r in ranks:
        for termination, previous in ((r.terminated, False), (r.previous, True)):
            if termination is None or not termination.message:
                continue
            stall = parse_stall(termination.message.splitlines())
            if stall is not None:
                index = r.index if r.index is not None else 1 << 30
                order = (stall.collective is not None, termination.finished_at or "~", index)
                candidates.append((order, r, stall, previous))
                break
    if not candidates:
        return None
    _, rank, stall, previous = min(candidates, key=lambda c: c[0])
    return rank, stall, previous


def stall_finding(rank: RankState, stall: Stall, previous: bool) -> Finding:
    """A rank that took no optimizer step for stall_timeout (or its first for startup_timeout)."""
    restarted = f", restarted {rank.restarts} times" if rank.restarts else ""
    if stall.collective:
        fix = (
            f"it waited in {stall.collective} for a rank that never joined: look at the other ranks' logs "
            "(`vdk execute --logs`) for the one that stopped stepping or took another path"
        )
    else:
        fix = (
            "see where it was (below): a data loader or queue that waits forever, a collective that other ranks "
            "never join, a deadlock"
        )
    fix += (
        "; if a step, an evaluation or a checkpoint really takes that long, raise `stall_timeout` "
        "(`startup_timeout` before the first step) in [ml-training]"
    )
    return Finding(
        "failed",
        f"rank {stall.rank} stalled: {stall.summary()} (pod {rank.pod}{restarted})",
        fix,
        [rank.rank],
        log_source=f"rank {rank.rank}, pod {rank.pod}" + (", previous container" if previous else ""),
        stall=stall,
    )


def blamed_rank(ranks: list[RankState]) -> tuple[RankState, bool] | None:
    """(rank, whether its previous container) whose log explains the failure: the stalled one, else the first
    that failed."""
    stalled = stalled_rank(ranks)
    if stalled is not None:
        return stalled[0], stalled[2]
    culprit = failing_rank(ranks)
    return (culprit[0], culprit[2]) if culprit is not None else None


def failing_rank(ranks: list[RankState]) -> tuple[RankState, Termination, bool] | None:
    """(rank, its failed termination, whether that is the previous container) of the failure
    that came first. Ranks stopped by SIGTERM usually only followed another rank's failure. Within the
    same second (the API's precision), a container killed by a signal (OOM killer, a lost node) comes
    before one that exited with an error: its peers' errors follow its death within milliseconds."""
    candidates = []
    for r in ranks:
        for termination, previous in ((r.terminated, False), (r.previous, True)):
            if termination is not None and termination.failed:
                killed = termination.reason == "OOMKilled" or termination.signal is not None
                candidates.append(
                    (
                        termination.exit_code == SIGTERM_EXIT,
                        termination.finished_at or "~",
                        not killed,
                        r.index if r.index is not None else 1 << 30,
                        r,
                        termination,
                        previous,
                    )
                )
                break
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[:4])
    _, _, _, _, rank, termination, previous = candidates[0]
    return rank, termination, previous


def termination_meaning(t: Termination, memory_limit: str | None = None) -> tuple[str, str | None]:
    """(what happened, what to do) for a container that ended badly."""
    limit = f" (memory = {memory_limit})" if memory_limit else ""
    if t.reason == "OOMKilled":
        return (
            f"was OOMKilled: it used more memory than its limit{limit}",
            "raise `memory` in [ml-training], or use less: a smaller batch size, fewer DataLoader workers",
        )
    if t.reason in ("ContainerCannotRun", "StartError"):
        return (
            f"could not start: {t.message or t.reason}",
            "check `entrypoint` in [ml-training] and that the base image has Python and torch",
        )
    code, sig = t.exit_code, t.signal
    if sig == "SIGKILL":
        return (
            f"was killed (SIGKILL, exit code {code})",
            "usually the node ran low on memory or the pod was stopped by force; see the events",
        )
    if sig == "SIGTERM":
        return (
            f"was stopped (SIGTERM, exit code {code})",
            "it was cancelled, preempted, reached `max_runtime`, or stopped because another rank failed first",
        )
    if sig == "SIGSEGV":
        return (
            f"crashed (SIGSEGV, exit code {code})",
            "a native library crashed: often a CUDA/NCCL mismatch between the job's packages and the base image",
        )
    if sig:
        return f"was ended by {sig} (exit code {code})", None
    return f"exited with code {code}", "the training code failed: see the end of its log"


def log_hints(lines: list[str]) -> list[str]:
    """What the well-known errors in a log tail mean, first match per kind."""
    text = "\n".join(lines)
    return [hint.advice for hint in LOG_HINTS if re.search(hint.pattern, text)]


# --- helpers -------------------------------------------------------------------------------------


def _fix_for(message: str, table: tuple[Fix, ...]) -> str | None:
    """The advice of the first entry of `table` whose pattern is in `message` (any case)."""
    for fix in table:
        if re.search(fix.pattern, message or "", re.IGNORECASE):
            return fix.advice
    return None


def _ranks_text(ranks: list[RankState]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0].rank} (pod {ranks[0].pod})"
    return f"ranks {_compress([r.rank for r in ranks])}"


def _compress(ranks: list[str]) -> str:
    """["1", "2", "3", "5"] -> "1-3, 5"."""
    numbers = sorted(int(r) for r in ranks if r.isdigit())
    others = [r for r in ranks if not r.isdigit()]
    spans: list[str] = []
    start = prev = None
    for n in numbers + [None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(spans + others)


def _int(value) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
