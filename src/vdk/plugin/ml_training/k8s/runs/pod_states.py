"""The state of a cluster run's ranks, from the objects read from the cluster (dicts in, dataclasses out):
each rank's newest pod and how its containers ended, the events about the run, its honest phase, and which
rank's failure came first (the stall watchdog's, else the first container that died). What they mean and
what to do about it is the diagnosis' (`k8s/runs/cluster_evidence.py` hands them to `diagnosis/`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.backends.base import completion_index_rank
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import parse_stall

SIGTERM_EXIT = 128 + signal.SIGTERM


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


# --- ranks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankFailure:
    """A container of a rank that failed while the run was followed: how it ended, and its last lines."""

    rank: str
    pod: str
    ended: str  # "exited with code 1", "OOMKilled (exit code 137)"
    restarted: bool  # the rank's container was started again after it (the run goes on)
    tail: list[str] = field(default_factory=list)
    unavailable: str | None = None  # why its log could not be read

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
    cstatus: dict = next((c for c in status.get("containerStatuses") or [] if c.get("name") == name), {})
    state = cstatus.get("state") or {}
    waiting = state.get("waiting") or {}
    waiting = _failed_init(status) or waiting
    scheduled: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
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


def _failed_init(status: dict) -> dict | None:
    """An init container that failed holds the pod before its containers start: what kubectl shows
    (`Init:Error`, `Init:CrashLoopBackOff`), with the message it left."""
    for init in status.get("initContainerStatuses") or []:
        state = init.get("state") or {}
        ended = state.get("terminated") or (init.get("lastState") or {}).get("terminated") or {}
        if ended and _int(ended.get("exitCode")) not in (0, None):
            reason = (state.get("waiting") or {}).get("reason") or ended.get("reason") or "Error"
            message = (ended.get("message") or "").strip() or f"init container {init.get('name')} failed"
            return {"reason": f"Init:{reason}", "message": message}
    return None


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


# --- which rank failed first ------------------------------------------------------------------------


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


def _int(value) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
