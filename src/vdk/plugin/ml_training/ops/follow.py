"""Following a run until it ends (`vdk deploy --follow`, `vdk execute --show --follow`): rank 0's log as it is
written (its progress lines among what the script prints), the last lines of every rank whose container fails,
as it fails (a restarted one too), why a rank has no log yet, and at the end the run's outcome with the diagnosis
of a failure. The reading itself is k8s/runs/observe.py's; KeyboardInterrupt stops following, the run goes on. What
it sees as it goes is the reporter's (ops/reporting.py): rank 0's lines (`log_line`), each failed container
(`rank_failed`), why ranks have no log yet (notes).

    result = follow_job(find_scope("mnist"), reporter=reporter)
    sys.exit(0 if result.succeeded else 1)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.runs import observe
from vdk.plugin.ml_training.k8s.runs.observe import RunDetail
from vdk.plugin.ml_training.k8s.runs.pod_states import RankFailure
from vdk.plugin.ml_training.k8s.runs.pod_states import RankState
from vdk.plugin.ml_training.k8s.runs.pod_states import Termination
from vdk.plugin.ml_training.k8s.runs.summary import SUCCEEDED
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.ops.logs import why_no_log
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import pick_run

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
    from vdk.plugin.ml_training.ops.deploy_plan import DeployResult

FAILED_TAIL_LINES = 20  # of a rank whose container failed


class FollowTimeUp(Exception):
    """Following stopped at its `until` time; the run goes on."""


@dataclass(frozen=True)
class FollowedRun:
    """How a followed run ended: its last summary, the rank failures seen on the way, and the diagnosis of a run
    that did not succeed (None when it succeeded)."""

    run: RunSummary
    failures: list[RankFailure]
    detail: RunDetail | None

    @property
    def succeeded(self) -> bool:
        return self.run.phase == SUCCEEDED

    def to_dict(self) -> dict:
        return {
            "run": self.run.to_dict(),
            "succeeded": self.succeeded,
            "failures": [f.to_dict() for f in self.failures],
            "detail": self.detail.to_dict() if self.detail is not None else None,
        }


def follow_run(
    client: KubeClient,
    run: RunSummary,
    reporter: Reporter | None = None,
    *,
    selection: JobSelection | None = None,
    poll_seconds: float | None = None,
    until: float | None = None,
) -> FollowedRun:
    """Follow `run` until it ends and every log was read: `reporter.following(run, selection)` first, then
    `log_line("0", line)` for each line rank 0 writes, `rank_failed(...)` once for each container of a rank that
    fails (with its last lines), a note why ranks have no log yet. KeyboardInterrupt (Ctrl-C) stops following;
    the run goes on. With `until` (a time.time()), FollowTimeUp stops it at the first poll after that time (the run
    goes on too)."""
    reporter = or_quiet(reporter)
    failures: list[RankFailure] = []
    reported: set[tuple[str, int]] = set()  # (pod, container instance) whose failure was shown

    def write(rank: str, line: str) -> None:
        if rank == "0":
            reporter.log_line(rank, line)

    def seen(ranks: list[RankState]) -> None:
        if until is not None and time.time() >= until:
            raise FollowTimeUp(run.name)
        report(ranks)

    def report(ranks: list[RankState]) -> None:
        for rank in ranks:
            for instance, ended, previous in _failed_instances(rank):
                if (rank.pod, instance) in reported:
                    continue
                reported.add((rank.pod, instance))
                failure = _failure(client, rank, ended, previous)
                failures.append(failure)
                reporter.rank_failed(failure)

    reporter.following(run, selection)
    final = observe.follow_logs(client, run, write, why_no_log(reporter), poll_seconds, seen=seen)
    if final.phase == SUCCEEDED:
        return FollowedRun(final, failures, None)
    detail = observe.inspect_run(client, final)
    report(detail.ranks)  # a rank that failed after the last poll
    return FollowedRun(final, failures, detail)


def follow_job(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> FollowedRun:
    """`follow_run` of the run `run_id` of the scope's job (default the latest)."""
    command = execute_command("show", run_id) + " --follow"
    selection, run = pick_run(scope, command, run_id, reporter=reporter)
    return follow_run(selection.client, run, reporter, selection=selection)


def follow_deployed(result: DeployResult, reporter: Reporter | None = None) -> FollowedRun:
    """`follow_run` of the run a deploy just started (ops/deploy.py's result)."""
    from vdk.plugin.ml_training.k8s.runs.summary import summarize

    client = result.plan.target.client
    assert client is not None  # a deploy's target is a connected cluster
    run = summarize(client.get_run(result.plan.run.name, result.plan.target.backend))
    return follow_run(client, run, reporter)


def _failed_instances(rank: RankState) -> list[tuple[int, Termination, bool]]:
    """(instance number, how it ended, whether it is the previous instance) of the rank's failed containers."""
    out = []
    if rank.previous is not None and rank.previous.failed and rank.restarts > 0:
        out.append((rank.restarts - 1, rank.previous, True))
    if rank.terminated is not None and rank.terminated.failed:
        out.append((rank.restarts, rank.terminated, False))
    return out


def _failure(client: KubeClient, rank: RankState, ended: Termination, previous: bool) -> RankFailure:
    try:
        text, why = client.pod_log(rank.pod, rank.container, previous=previous, tail_lines=FAILED_TAIL_LINES)
    except KubeApiError as e:  # its log may not be read (403), or the server did not answer
        text, why = None, e.detail or e.problem
    tail = (text or "").splitlines()[-FAILED_TAIL_LINES:]
    return RankFailure(rank.rank, rank.pod, ended.describe(), previous, tail, None if text is not None else why)
