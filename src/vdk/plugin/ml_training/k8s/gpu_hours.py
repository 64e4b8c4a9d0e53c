"""GPU-hours by team and job, how they were used and wasted, by cause (`vdk list --usage`), from the runs in a
namespace (dicts and RunSummaries in, dataclasses out).

A run holds `nodes x GPUs per node` GPUs (a MIG slice counts as its share of a GPU, `gpu_share`) from
its start to its end, or to now while it runs. Those GPU-hours are, by cause:

    allocated = used + idle + start-up + after the last step + redone + failed + stalled + cancelled (+ running)

Every GPU-hour of a run that failed, stalled or was cancelled is wasted under that cause. Of a run that ended
well: start-up is from its start to its first optimizer step, after the last step how long the script ran on
(rank 0's last progress line), and the time between is used, less the training its restarts redid (redone: the
steps each ended attempt of rank 0 took past where the next one went on from, at its rate; from the containers'
termination messages, k8s/runs/restarts.py) and the share its GPUs sat below the idle threshold (idle). The measured
utilisation is the SM-activity-weighted GPU-hours over the allocated ones. The figures come from each node's GPU
totals in its container's termination message (k8s/gpu_measure.py); a run without them (no NVML) counts its time
between start and the last step as used, and no utilisation.

A run deleted by `vdk delete` or `vdk execute --cancel` leaves a usage record (`usage_record`, read by
`parse_usage_record`): a ConfigMap `<run>-usage`, kept as long as the run would have been kept after it
ended. Runs deleted otherwise (their TTL, `kubectl delete`) are gone: the report says from when on it is
complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import replace
from datetime import datetime
from datetime import timedelta
from datetime import timezone

from vdk.plugin.ml_training.k8s import gpu_measure
from vdk.plugin.ml_training.k8s.runs import identity as run_meta
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs import restarts
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.nvidia import mig_name
from vdk.plugin.ml_training.vocabulary.nvidia import mig_profile_of

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STALLED = "stalled"
CANCELLED = "cancelled"
WASTED = (FAILED, STALLED, CANCELLED)  # every GPU-hour of such a run was wasted
# What allocated GPU-hours were, by cause (Totals' fields and the columns of `vdk list --usage`).
CAUSES = ("used", "idle", "startup", "after_last_step", "redone", FAILED, STALLED, CANCELLED, RUNNING)

# A usage record: the ConfigMap a deleted run leaves behind (labelled runs/identity.LABEL_USAGE_OF).
USAGE_SUFFIX = "-usage"
KEY_USAGE = "usage.json"
DEFAULT_KEPT_SECONDS = 7 * 86400  # ttl_after_finished's default: how long runs of unknown TTL are counted on


def gpu_share(resource: str | None) -> float:
    """What one unit of an accelerator resource is worth in GPUs: 1 for a GPU, a MIG slice's share of one
    (`nvidia.com/mig-1g.10gb`: 1/7, `mig-3g.40gb`: 3/7, `mig-1c.3g.40gb`: 1/7, A30's `mig-2g.12gb`: 2/4)."""
    if not resource:
        return 0.0
    profile = mig_profile_of(resource)
    if profile is None:
        return 1.0
    name = mig_name(profile)
    return name.share if name is not None else 1.0  # an unknown naming: a whole GPU rather than not at all


@dataclass(frozen=True)
class RunUsage:
    """The GPUs one run held, from when to when, and how it ended."""

    run: str
    job: str
    team: str | None  # as written; None for runs without a team
    team_label: str | None
    backend: str | None
    outcome: str  # RUNNING, SUCCEEDED, FAILED, STALLED or CANCELLED
    start: datetime
    end: datetime | None  # None: it still runs
    gpus: float  # nodes x GPUs per node x the share of a GPU each one is
    after_last_step: float | None = None  # seconds it ran after its last optimizer step (successful runs)
    kept_seconds: int | None = None  # kept that long after it ended (None: until deleted)
    startup: float | None = None  # seconds from its start to its first optimizer step (measured runs)
    idle_share: float | None = None  # of the time between its first and last step, the share its GPUs sat idle
    utilisation: float | None = None  # SM-activity-weighted GPU-hours over the allocated ones
    redone: float | None = None  # seconds of training its restarts redid (k8s/runs/restarts.py: steps at their rate)

    def hours(self, since: datetime, now: datetime) -> float:
        """GPU-hours held between `since` and `now`."""
        return self.gpus * _overlap(self.start, self.end or now, since, now) / 3600

    def wasted(self, since: datetime, now: datetime) -> float:
        """GPU-hours between `since` and `now` that trained nothing: all causes but used (and running)."""
        causes = self.causes(since, now)
        return sum(v for k, v in causes.items() if k not in ("used", RUNNING))

    def idle(self, since: datetime, now: datetime) -> float:
        """GPU-hours after the last optimizer step of a run that ended well."""
        if self.outcome != SUCCEEDED or not self.after_last_step or self.end is None:
            return 0.0
        return self.gpus * _overlap(self.end - timedelta(seconds=self.after_last_step), self.end, since, now) / 3600

    def causes(self, since: datetime, now: datetime) -> dict[str, float]:
        """The GPU-hours between `since` and `now` by cause (CAUSES); they add up to `hours`."""
        total = self.hours(since, now)
        out = dict.fromkeys(CAUSES, 0.0)
        if self.outcome != SUCCEEDED:
            out[self.outcome] = total
            return out
        startup = 0.0
        if self.startup:
            startup = self.gpus * _overlap(self.start, self.start + timedelta(seconds=self.startup), since, now) / 3600
        after = self.idle(since, now)
        startup = min(startup, total)
        after = min(after, total - startup)
        window = total - startup - after
        redone = 0.0
        if self.redone and self.end is not None and self.end > self.start:  # its share of what the window holds
            redone = min(window, total * self.redone / (self.end - self.start).total_seconds())
        window -= redone
        idle = window * self.idle_share if self.idle_share is not None else 0.0
        out.update(used=window - idle, idle=idle, startup=startup, after_last_step=after, redone=redone)
        return out

    def busy(self, since: datetime, now: datetime) -> float | None:
        """SM-activity-weighted GPU-hours between `since` and `now` (None: not measured)."""
        return self.utilisation * self.hours(since, now) if self.utilisation is not None else None

    def to_dict(self, since: datetime, now: datetime) -> dict:
        return {
            "run": self.run,
            "outcome": self.outcome,
            "backend": self.backend,
            "start": _iso(self.start),
            "end": _iso(self.end) if self.end else None,
            "gpus": round(self.gpus, 4),
            "gpu_hours": round(self.hours(since, now), 4),
            "wasted_gpu_hours": round(self.wasted(since, now), 4),
            "after_last_step_seconds": self.after_last_step,
            "startup_seconds": self.startup,
            "redone_seconds": self.redone,
            "idle_share": _rounded(self.idle_share),
            "utilisation": _rounded(self.utilisation),
            "gpu_hours_by_cause": {k: round(v, 4) for k, v in self.causes(since, now).items()},
        }


def run_usage(run: RunSummary, pods: list[dict], now: datetime) -> RunUsage | None:
    """How `run` used its GPUs, from its summary and its pods' termination messages; None when it never
    started (queued, or waiting for its operator) or holds no accelerator."""
    start = parse_time(run.started)
    if start is None:
        return None
    nodes = int((run.nodes or "1").split(":")[-1] or 1)
    gpus = nodes * run.gpus_per_node * gpu_share(run.gpu_resource)
    ranks = pod_states.rank_states(pods, run.backend)
    outcome = {run_summary.SUCCEEDED: SUCCEEDED, run_summary.FAILED: FAILED}.get(run.phase, RUNNING)
    if outcome == FAILED and pod_states.stalled_rank(ranks) is not None:
        outcome = STALLED
    end = parse_time(run.ended) if outcome != RUNNING else None
    if outcome != RUNNING and end is None:
        end = now  # finished, but its operator wrote no time: counted to now, which the report would overstate
    measured = gpu_measure.run_gpus(ranks) if outcome != RUNNING else None
    redone = restarts.redone_seconds(pods, run.backend) if outcome == SUCCEEDED else None
    first_step = measured.first_step if measured is not None else None
    return RunUsage(
        run=run.name,
        job=run.job_name or run.name,
        team=run.team if run.team_label else None,
        team_label=run.team_label,
        backend=run.backend,
        outcome=outcome,
        start=start,
        end=end,
        gpus=gpus,
        after_last_step=_after_last_step(ranks) if outcome == SUCCEEDED else None,
        kept_seconds=run.kept_seconds,
        startup=max(0.0, first_step - start.timestamp()) if first_step is not None else None,
        idle_share=measured.idle_share if measured is not None else None,
        utilisation=measured.utilisation(((end or now) - start).total_seconds()) if measured is not None else None,
        redone=redone,
    )


def _after_last_step(ranks: list[pod_states.RankState]) -> float | None:
    """What rank 0's last progress line (its container's termination message) says."""
    rank0 = next((r for r in ranks if r.index == 0), None)
    ended = rank0.terminated if rank0 is not None else None
    if ended is None or not ended.message:
        return None
    last = parse_progress(ended.message.splitlines())
    return last.after_last_step_seconds if last is not None else None


# --- usage records of deleted runs ---------------------------------------------------------------------


def usage_record(usage: RunUsage, namespace: str, deleted_by: str | None, now: datetime) -> dict:
    """The ConfigMap that keeps a run's usage once `vdk delete` or `--cancel` deleted it: cancelled if it
    still ran, with the end it had otherwise. Not owned by the run, so that it outlives it."""
    end = usage.end if usage.end is not None else now
    ended = usage if usage.end is not None else replace(usage, outcome=CANCELLED, end=end)
    kept = ended.kept_seconds if ended.kept_seconds is not None else DEFAULT_KEPT_SECONDS
    data = {**asdict(ended), "start": _iso(ended.start), "end": _iso(end), "deleted_by": deleted_by}
    data["expires"] = _iso(max(end, now) + timedelta(seconds=kept))
    labels = {
        run_meta.LABEL_JOB: ended.job,
        run_meta.LABEL_USAGE_OF: ended.run,
        run_meta.LABEL_MANAGED_BY: run_meta.MANAGED_BY,
    }
    if ended.backend:
        labels[run_meta.LABEL_BACKEND] = ended.backend
    if ended.team_label:
        labels[run_meta.LABEL_TEAM] = ended.team_label
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{ended.run}{USAGE_SUFFIX}", "namespace": namespace, "labels": labels},
        "data": {KEY_USAGE: json.dumps(data, sort_keys=True)},
    }


def parse_usage_record(configmap: dict) -> tuple[RunUsage, datetime | None] | None:
    """(the run's usage, when the record expires) of a usage record; None when it is not readable."""
    try:
        data = json.loads(((configmap.get("data") or {}).get(KEY_USAGE)) or "")
        start = parse_time(data["start"])
        if start is None:
            return None
        usage = RunUsage(
            run=data["run"],
            job=data["job"],
            team=data.get("team"),
            team_label=data.get("team_label"),
            backend=data.get("backend"),
            outcome=data["outcome"],
            start=start,
            end=parse_time(data.get("end")),
            gpus=float(data["gpus"]),
            after_last_step=data.get("after_last_step"),
            kept_seconds=data.get("kept_seconds"),
            startup=data.get("startup"),
            idle_share=data.get("idle_share"),
            utilisation=data.get("utilisation"),
            redone=data.get("redone"),
        )
    except (ValueError, KeyError, TypeError):
        return None
    return usage, parse_time(data.get("expires"))


# --- the report -----------------------------------------------------------------------------------------


@dataclass
class Totals:
    """Allocated GPU-hours, by cause (they add up: `CAUSES`), the wasted ones, and the measured utilisation."""

    runs: int = 0
    gpu_hours: float = 0.0
    wasted: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    startup: float = 0.0
    after_last_step: float = 0.0
    redone: float = 0.0  # trained again after restarts: the steps an attempt took past where the next went on from
    failed: float = 0.0
    stalled: float = 0.0
    cancelled: float = 0.0
    running: float = 0.0
    busy: float = 0.0  # SM-activity-weighted GPU-hours of the measured runs
    measured: float = 0.0  # allocated GPU-hours of the measured runs

    def add(self, usage: RunUsage, since: datetime, now: datetime) -> None:
        self.runs += 1
        hours = usage.hours(since, now)
        self.gpu_hours += hours
        self.wasted += usage.wasted(since, now)
        for cause, value in usage.causes(since, now).items():
            setattr(self, cause, getattr(self, cause) + value)
        busy = usage.busy(since, now)
        if busy is not None:
            self.busy += busy
            self.measured += hours

    @property
    def wasted_share(self) -> float | None:
        return self.wasted / self.gpu_hours if self.gpu_hours else None

    @property
    def utilisation(self) -> float | None:
        """SM-activity-weighted GPU-hours over the allocated ones, of the runs whose GPUs were measured."""
        return self.busy / self.measured if self.measured else None

    def to_dict(self) -> dict:
        out = {key: round(value, 4) if isinstance(value, float) else value for key, value in asdict(self).items()}
        out["wasted_share"] = _rounded(self.wasted_share)
        out["utilisation"] = _rounded(self.utilisation)
        return out


@dataclass
class UsageReport:
    """Usage per team and per (team, job) between `since` and `now`."""

    since: datetime
    now: datetime
    complete_from: datetime  # runs that ended before may have been deleted by their TTL
    runs: list[RunUsage]
    notes: list[str]

    def totals(self, usages: Iterable[RunUsage] | None = None) -> Totals:
        totals = Totals()
        for usage in self.runs if usages is None else usages:
            totals.add(usage, self.since, self.now)
        return totals

    def by_team(self) -> list[tuple[str | None, Totals]]:
        teams = sorted({u.team_label for u in self.runs}, key=lambda t: (t is None, t or ""))
        return [(self._team_name(t), self.totals(u for u in self.runs if u.team_label == t)) for t in teams]

    def by_job(self) -> list[tuple[str | None, str, Totals, list[RunUsage]]]:
        keys = sorted({(u.team_label, u.job) for u in self.runs}, key=lambda k: (k[0] is None, k[0] or "", k[1]))
        out = []
        for team, job in keys:
            runs = sorted((u for u in self.runs if (u.team_label, u.job) == (team, job)), key=lambda u: u.start)
            out.append((self._team_name(team), job, self.totals(runs), runs))
        return out

    def _team_name(self, label: str | None) -> str | None:
        return next((u.team for u in self.runs if u.team_label == label and u.team), label)

    def to_dict(self) -> dict:
        return {
            "from": _iso(self.since),
            "to": _iso(self.now),
            "complete_from": _iso(self.complete_from),
            "totals": self.totals().to_dict(),
            "teams": [{"team": team, **totals.to_dict()} for team, totals in self.by_team()],
            "jobs": [
                {
                    "team": team,
                    "job": job,
                    **totals.to_dict(),
                    "run_usage": [u.to_dict(self.since, self.now) for u in runs],
                }
                for team, job, totals, runs in self.by_job()
            ],
            "notes": list(self.notes),
        }


def report(
    runs: list[RunSummary],
    pods: list[dict],
    records: list[dict],
    now: datetime,
    since_seconds: int | None = None,
) -> UsageReport:
    """The usage of `runs` (with every pod of theirs that `pods` has) and of the deleted runs of `records`,
    since `since_seconds` ago (default: since the earliest start)."""
    pods_by_run: dict[str | None, list[dict]] = {}  # by the run label (None: a pod without one)
    for pod in pods:
        pods_by_run.setdefault(((pod.get("metadata") or {}).get("labels") or {}).get(run_meta.LABEL_RUN), []).append(
            pod
        )
    usages, waiting = [], 0
    for run in runs:
        usage = run_usage(run, pods_by_run.get(run.name, []), now)
        if usage is None:
            waiting += 1
        elif usage.gpus:
            usages.append(usage)
    seen = {u.run for u in usages}
    for record in records:
        parsed = parse_usage_record(record)
        if parsed is not None and parsed[0].run not in seen and (parsed[1] is None or parsed[1] > now):
            usages.append(parsed[0])
    earliest = min((u.start for u in usages), default=now)
    since = now - timedelta(seconds=since_seconds) if since_seconds is not None else earliest
    usages = [u for u in usages if (u.end or now) > since]
    # runs kept until deleted (some backends have no TTL) count as kept for ttl_after_finished's default
    kept = min((u.kept_seconds for u in usages if u.kept_seconds is not None), default=DEFAULT_KEPT_SECONDS)
    complete_from = now - timedelta(seconds=kept)
    notes = []
    if since < complete_from:
        notes.append(
            f"finished runs are deleted with their records {_days(kept)} after they end (ttl_after_finished): runs "
            f"that ended before {_iso(complete_from)} may be gone and are not counted"
        )
    running = sum(1 for u in usages if u.outcome == RUNNING)
    if running:
        notes.append(f"{counted(running, 'run')} still running: counted to now, split by cause once they end")
    if waiting:
        notes.append(
            f"{counted(waiting, 'run')} not started (queued or waiting for their operator): they hold no GPUs yet"
        )
    return UsageReport(since, now, complete_from, usages, notes)


# --- times -----------------------------------------------------------------------------------------------

parse_time = gpu_measure.parse_time


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _overlap(start: datetime, end: datetime, since: datetime, now: datetime) -> float:
    return max(0.0, (min(end, now) - max(start, since)).total_seconds())


def _days(seconds: int) -> str:
    return f"{seconds // 86400}d" if seconds % 86400 == 0 else f"{seconds / 3600:g}h"
