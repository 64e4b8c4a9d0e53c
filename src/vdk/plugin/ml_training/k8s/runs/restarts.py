"""Every restart of a run, with its cause and the steps it redid (`vdk show`), from what the cluster still holds:

- a pod of a rank that ended and was replaced by a newer one (a Job, a JobSet, the training operator create the
  next); its cause from its `DisruptionTarget` condition (Kubernetes 1.26+: who stopped it and why), else its
  status' reason (the kubelet's `Evicted`), else how its container ended (OOMKilled, an exit code);
- a container restarted in place (a backend whose pods restart their containers, `OnFailure`): its last termination;
- a pod that is gone (an eviction or a preemption deletes it once its controller counted it): the event that
  stopped it (`Preempted`, `Evicted`, `TaintManagerEviction`), while the cluster keeps events (an hour by default).

A disruption (preempted, evicted, node lost) is the cluster's doing; OOMKilled and a failed exit are the run's. The
steps redone are those the ended attempt reached (rank 0's last progress line in its log) less the step the next
attempt went on from (its `resumed=` field; 0 when it started over): known for rank 0's restarts whose logs are
still there.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import replace

from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.backends.base import DISRUPTION_TARGET
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs.pod_states import Termination
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress

PREEMPTED = "preempted"
EVICTED = "evicted"
NODE_LOST = "node lost"
OOM_KILLED = "OOMKilled"
CODE_FAILED = "the code failed"
DISRUPTIONS = (PREEMPTED, EVICTED, NODE_LOST)
# The DisruptionTarget condition's reasons (k8s.io/api/core/v1 types.go) and what they are to a user.
DISRUPTION_REASONS = {
    "PreemptionByScheduler": PREEMPTED,
    "EvictionByEvictionAPI": EVICTED,  # a drain, the descheduler, a PodDisruptionBudget-aware eviction
    "TerminationByKubelet": EVICTED,  # node pressure, a graceful node shutdown
    "DeletionByTaintManager": NODE_LOST,  # a NoExecute taint: node.kubernetes.io/unreachable, not-ready, ...
    "DeletionByPodGC": NODE_LOST,  # its node is gone
}
# Events that stopped a pod that is gone, by reason.
STOPPING_EVENTS = {"Preempted": PREEMPTED, "Evicted": EVICTED, "TaintManagerEviction": NODE_LOST}
MOST_LOGS_READ = 6  # logs read for the steps redone: the latest restarts of rank 0
LogTail = Callable[[str, str, bool], "tuple[str | None, str | None]"]  # (pod, container, previous)


@dataclass(frozen=True)
class Restart:
    """One ended attempt of a rank, and what followed."""

    rank: str
    pod: str  # the pod that ended (for a restart in place: the pod whose container restarted)
    cause: str  # PREEMPTED, EVICTED, NODE_LOST, OOM_KILLED or CODE_FAILED
    detail: str  # who or what said so: the condition's reason and message, the exit code
    at: str | None  # when it ended
    counted: bool | None  # whether it counts against max_restarts; None: the runtime's failure policy decides
    times: int = 1  # a container restarted in place this many times (the cause is the last one's)
    in_place: bool = False  # its container restarted in the same pod (else a new pod replaced it)
    reached: int | None = None  # the step the ended attempt reached
    resumed: int | None = None  # the step the next attempt went on from (0: it started over)

    @property
    def disruption(self) -> bool:
        return self.cause in DISRUPTIONS

    @property
    def steps_redone(self) -> int | None:
        if self.reached is None or self.resumed is None:
            return None
        return max(self.reached - self.resumed, 0)

    def to_dict(self) -> dict:
        return {**asdict(self), "disruption": self.disruption, "steps_redone": self.steps_redone}


def run_restarts(pods: Iterable[dict], backend: str | None, events: Iterable[Event] = ()) -> list[Restart]:
    """The run's restarts, oldest first, from its pods (every attempt the cluster still lists) and its events."""
    known = backends.find(backend)
    free = known.disruptions_free if known is not None else True
    by_rank: dict[str, list[dict]] = {}
    for pod in pods:
        by_rank.setdefault(pod_states.rank_of(pod, backend)[1], []).append(pod)
    found: list[Restart] = []
    listed = set()
    for rank, group in by_rank.items():
        group.sort(key=_created)
        for i, pod in enumerate(group):
            state = pod_states.pod_state(pod, backend)
            listed.add(state.pod)
            if state.previous is not None and state.restarts:
                cause, detail = _ended(state.previous)
                at = state.previous.finished_at
                found.append(Restart(rank, state.pod, cause, detail, at, True, state.restarts, in_place=True))
            if i + 1 < len(group):  # replaced by a newer pod of its rank
                cause, detail = pod_cause(pod, state.terminated)
                at = state.terminated.finished_at if state.terminated else None
                found.append(Restart(rank, state.pod, cause, detail, at or state.created, _counted(cause, free)))
    for event in events:
        kind, _, name = event.object.partition("/")
        stopped = STOPPING_EVENTS.get(event.reason)
        if kind == "Pod" and stopped and name not in listed:
            detail = f"{event.reason}: {event.message}"
            found.append(Restart("?", name, stopped, detail, event.last_seen, _counted(stopped, free)))
    return sorted(found, key=lambda r: r.at or "")


def _counted(cause: str, disruptions_free: bool) -> bool | None:
    if cause not in DISRUPTIONS:
        return True
    return False if disruptions_free else None


def _created(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("creationTimestamp") or ""


def pod_cause(pod: dict, terminated: Termination | None) -> tuple[str, str]:
    """(cause, what said so) of a pod that ended."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == DISRUPTION_TARGET and str(condition.get("status")) == "True":
            reason = condition.get("reason") or ""
            said = ": ".join(x for x in (reason, (condition.get("message") or "").strip()) if x)
            return DISRUPTION_REASONS.get(reason, EVICTED), said or DISRUPTION_TARGET
    if status.get("reason") == "Evicted":
        return EVICTED, ": ".join(x for x in ("Evicted", (status.get("message") or "").strip()) if x)
    if status.get("reason") == "NodeLost":
        return NODE_LOST, "NodeLost"
    if terminated is not None:
        return _ended(terminated)
    return NODE_LOST, f"the pod ended without its container's end ({status.get('phase') or 'unknown'})"


def _ended(termination: Termination) -> tuple[str, str]:
    cause = OOM_KILLED if termination.reason == "OOMKilled" else CODE_FAILED
    return cause, termination.describe()


def with_steps(restarts: list[Restart], pods: Iterable[dict], backend: str | None, tail: LogTail) -> list[Restart]:
    """The restarts with the steps rank 0's latest ones (MOST_LOGS_READ) redid, from the logs still there."""
    rank0 = sorted((p for p in pods if pod_states.rank_of(p, backend)[0] == 0), key=_created)
    if not rank0:
        return restarts
    names: list[str] = [str((p.get("metadata") or {}).get("name")) for p in rank0]
    container = pod_states.pod_state(rank0[0], backend).container
    out = list(restarts)
    for i in [i for i, r in enumerate(out) if r.rank == "0" and r.pod in names][-MOST_LOGS_READ:]:
        restart = out[i]
        if restart.in_place:  # only the last restart's two containers have their logs
            ended, following = (restart.pod, True), (restart.pod, False)
        else:
            ended, following = (restart.pod, False), (names[names.index(restart.pod) + 1], False)
        reached = _steps(tail, *ended, container)
        resumed = _steps(tail, *following, container, first=True) if reached is not None else None
        out[i] = replace(restart, reached=reached, resumed=resumed)
    return out


def redone_seconds(pods: list[dict], backend: str | None) -> float | None:
    """Seconds of training the restarts of rank 0 redid: for each, the steps redone at the rate its ended attempt
    trained (`steps_per_s` of its last progress line), read from the containers' termination messages (each
    attempt's last progress line, `resumed=` included: no log request). None when no restart's steps are known."""

    def message(pod_name: str, container: str, previous: bool) -> tuple[str | None, str | None]:
        pod = next(p for p in pods if (p.get("metadata") or {}).get("name") == pod_name)
        state = pod_states.pod_state(pod, backend)
        ended = state.previous if previous else state.terminated
        return (ended.message if ended is not None else None), None

    known = [r for r in with_steps(run_restarts(pods, backend), pods, backend, message) if r.steps_redone is not None]
    seconds = [_seconds(r, message) for r in known]
    found = [s for s in seconds if s is not None]
    return sum(found) if found else None


def _seconds(restart: Restart, message: LogTail) -> float | None:
    text, _ = message(restart.pod, "", restart.in_place)
    progress = parse_progress((text or "").splitlines())
    try:
        rate = float(progress.fields.get("steps_per_s") or 0) if progress is not None else 0.0
    except ValueError:
        return None
    return (restart.steps_redone or 0) / rate if rate > 0 else None


def _steps(tail: LogTail, pod: str, previous: bool, container: str, first: bool = False) -> int | None:
    """The step of the log's last progress line; `first`: where the attempt went on from (its first line's
    `resumed=` step, 0 when it has none: it started over); None when the log has no progress line."""
    try:
        text, _ = tail(pod, container, previous)
    except KubeApiError:
        return None
    lines = (text or "").splitlines()
    if not first:
        progress = parse_progress(lines)
        return progress.step if progress is not None else None
    for line in lines:
        progress = parse_progress([line])
        if progress is not None:
            step = (progress.fields.get("resumed") or "").rpartition("@")[2]
            return int(step) if step.isdigit() else 0
    return None
