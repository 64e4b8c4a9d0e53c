"""GPU-hours: allocated GPU-hours by team and job, by cause (used, idle, start-up, after the last step, failed,
stalled, cancelled) and the measured utilisation (`vdk list --usage`; the accounting is k8s/gpu_hours.py), and
the usage records that deleting runs leaves behind so that their hours stay counted. Five requests whatever the
number of runs: one list per backend, their pods (whose termination messages hold each node's GPU totals), the
records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s import gpu_hours
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.client import team_selector
from vdk.plugin.ml_training.k8s.gpu_hours import UsageReport
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_JOB
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_RUN
from vdk.plugin.ml_training.k8s.runs.selection import where
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.ops.typed_calls import checked

if TYPE_CHECKING:
    from vdk.plugin.ml_training.job.teams import TeamChoice
    from vdk.plugin.ml_training.ops.reporting import Reporter
    from vdk.plugin.ml_training.ops.scope import Scope

KIND_USAGE = "ml-training-usage"


@dataclass(frozen=True)
class GpuUsage:
    """The usage report of a namespace's runs (of one team, unless every team's), and where it was read."""

    report: UsageReport
    namespace: str
    context: str | None
    where: str  # "namespace ml (context lab)"
    team: TeamChoice | None  # None: every team's runs

    def to_dict(self) -> dict:
        return {
            "kind": KIND_USAGE,
            "namespace": self.namespace,
            "context": self.context,
            "team": (self.team.name or None) if self.team else None,
            **self.report.to_dict(),
        }


@checked
def gpu_usage(
    scope: Scope, all_teams: bool = False, since_seconds: int | None = None, reporter: Reporter | None = None
) -> GpuUsage:
    """GPU-hours by team and job in the scope's namespace (of the scope's team unless `all_teams`), by cause:
    used, idle, start-up, after the last optimizer step, failed, stalled, cancelled; and the measured
    utilisation. Only the last `since_seconds` when given (else since the oldest run still in the cluster)."""
    from vdk.plugin.ml_training.ops.scope import connected

    client = connected(scope, reporter)
    choice = None if all_teams else scope.team
    report = usage_report(client, choice, since_seconds)
    return GpuUsage(report, client.namespace, client.context, where(client), choice)


def usage_report(client: KubeClient, choice: TeamChoice | None, since_seconds: int | None) -> UsageReport:
    """The usage of the chosen team's runs (every team's without a choice) in the client's namespace."""
    team = {"team": choice.label, "unteamed": choice.label is None} if choice else {"team": None}
    runs = client.list_runs(**team)
    pods = client.list_pods(LABEL_RUN + team_selector(**team)) if runs else []
    records = client.usage_records(**team)
    return gpu_hours.report(runs, pods, records, datetime.now(timezone.utc), since_seconds)


def keep_usage(client: KubeClient, runs: list[RunSummary], deleted_by: str | None) -> list[str]:
    """Leave a usage record for each of `runs` about to be deleted, and delete the records that expired.
    Returns what could not be done: a deletion is not stopped for want of its usage record."""
    now = datetime.now(timezone.utc)
    problems = []
    try:
        # their pods hold each node's GPU figures (termination messages): one list per job, kept in the record
        pods: dict[str | None, list[dict]] = {}
        for job in {r.job_name for r in runs if r.job_name and r.gpus_per_node}:
            for pod in client.list_pods(f"{LABEL_JOB}={job},{LABEL_RUN}"):
                pods.setdefault(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN), []).append(pod)
        for run in runs:
            used = gpu_hours.run_usage(run, pods.get(run.name, []), now)
            if used is not None and used.gpus:
                client.keep_usage_record(gpu_hours.usage_record(used, client.namespace, deleted_by, now))
        for record in client.usage_records():
            parsed = gpu_hours.parse_usage_record(record)
            if parsed is not None and parsed[1] is not None and parsed[1] <= now:
                client.delete_usage_record(record["metadata"]["name"])
    except MLTrainingError as e:
        problems.append(f"the GPU-hours of the deleted runs are not kept for `vdk list --usage`: {e.problem}")
    return problems
