"""A cluster run's evidence for the diagnosis (`diagnosis/`): its ranks' pod states, its events and Kueue's
Workloads brought into the one shape every diagnosis reads, and the questions `vdk show` asks of it: why
the run waits, why it failed, why a rank has no log yet."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import ClusterFacts
from vdk.plugin.ml_training.diagnosis.evidence import Ending
from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.evidence import Workload
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.k8s.runs.pod_states import RankState
from vdk.plugin.ml_training.k8s.runs.pod_states import Termination
from vdk.plugin.ml_training.k8s.runs.pod_states import failing_rank
from vdk.plugin.ml_training.k8s.runs.pod_states import stalled_rank
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.runtime.watchdog import Stall


def run_evidence(
    run: RunSummary,
    ranks: list[RankState],
    events: Iterable[Event] = (),
    workloads: Iterable[dict] = (),
    pods_read: bool = True,
) -> Evidence:
    """What the run left: its ranks, the one whose failure came first, its phase, events and Workloads.
    `pods_read`: False when its pods could not be read (403), so that no ranks says nothing."""
    backend = backends.find(run.backend)
    facts = ClusterFacts(
        finished=run.finished,
        failed=run.phase == run_summary.FAILED,
        queued=run.phase == run_summary.QUEUED,
        expects_pods=run.phase in (run_summary.PENDING, run_summary.RUNNING),
        message=run.message,
        queue=run.queue,
        pods_read=pods_read,
        events=tuple(events),
        workloads=tuple(workload(w) for w in workloads),
    )
    if backend is not None:
        facts = dataclasses.replace(facts, no_pods_yet=backend.no_pods_yet(run.name, run.namespace))
    return Evidence(tuple(rank_evidence(r) for r in ranks), blame(ranks), cluster=facts)


def why_waiting(
    run: RunSummary, ranks: list[RankState], events: list[Event], workloads: list[dict], pods_read: bool = True
) -> list[Finding]:
    """Why a run that has not finished is not (fully) running yet."""
    return engine.why_waiting(run_evidence(run, ranks, events, workloads, pods_read))


def why_failed(run: RunSummary, ranks: list[RankState]) -> Finding | None:
    """The first failure of a failed (or failing) run."""
    return engine.why_failed(run_evidence(run, ranks))


def stalled_in_log(evidence: Evidence, stall: Stall) -> Evidence:
    """The evidence with the stall the blamed rank's log reports: every thread's stack, where a termination
    message holds the top frames only."""
    if evidence.blame is None:
        return evidence
    return dataclasses.replace(evidence, blame=dataclasses.replace(evidence.blame, stall=stall))


def rank_explanation(r: RankState) -> str:
    """Why a rank has no log (yet), in one line."""
    if r.waiting_reason == "CrashLoopBackOff" and r.previous is not None:
        return f"restarting after a crash: it {r.previous.describe()} (restarted {r.restarts} times)"
    reason = engine.why_rank_waits(rank_evidence(r))
    if reason:
        what, fix = reason
        return what + (f" — {fix}" if fix else "")
    if r.phase == "Pending":
        return "waiting to be scheduled" if not r.node else f"starting on {r.node}"
    return r.state


def blame(ranks: list[RankState]) -> Blame | None:
    """The rank whose failure came first: the one the stall watchdog stopped, else the first container that
    died (pod_states.py tells which)."""
    stalled = stalled_rank(ranks)
    if stalled is not None:
        rank, stall, previous = stalled
        return Blame(rank_evidence(rank), ending(rank.previous if previous else rank.terminated), previous, stall)
    culprit = failing_rank(ranks)
    if culprit is None:
        return None
    rank, termination, previous = culprit
    return Blame(rank_evidence(rank), ending(termination), previous)


def rank_evidence(r: RankState) -> RankEvidence:
    return RankEvidence(
        rank=r.rank,
        label=f"rank {r.rank}",
        index=r.index,
        pod=r.pod,
        ended=ending(r.terminated),
        previous=ending(r.previous),
        restarts=r.restarts,
        memory_limit=r.memory_limit,
        phase=r.phase,
        node=r.node,
        waiting_reason=r.waiting_reason,
        waiting_message=r.waiting_message,
        unschedulable=r.unschedulable,
        pod_reason=r.pod_reason,
        pod_message=r.pod_message,
    )


def ending(t: Termination | None) -> Ending | None:
    if t is None:
        return None
    return Ending(exit_code=t.exit_code, signal=t.signal, reason=t.reason, message=t.message, finished_at=t.finished_at)


def workload(obj: dict) -> Workload:
    """What Kueue's Workload object says: whether it has quota, was evicted, waits for admission checks."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    reserved = conditions.get("QuotaReserved") or {}
    evicted = conditions.get("Evicted") or {}
    checks = [c for c in status.get("admissionChecks") or [] if c.get("state") == "Pending"]
    refused = bool(reserved) and str(reserved.get("status")) == "False"
    return Workload(
        name=(obj.get("metadata") or {}).get("name"),
        quota_refused=refused,
        quota_message=reserved.get("message") if refused else None,
        quota_reason=reserved.get("reason") if refused else None,
        evicted=bool(evicted) and str(evicted.get("status")) == "True",
        evicted_message=evicted.get("message") if evicted else None,
        pending_checks=tuple(c.get("name", "?") for c in checks),
    )
