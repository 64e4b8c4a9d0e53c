"""The runs of ml-training jobs on the cluster: which jobs there are (`vdk list`), a job's runs and the latest
one's detail with its diagnosis (`vdk show`), one run's detail (`vdk execute --show`), running a past run
again exactly (`--start`), cancelling one (`--cancel`) and deleting a job's runs (`vdk delete`).

Each function takes a Scope (ops/scope.py) or the runs it selected and returns data with `to_dict()` for
JSON (stable keys); the text is the command line's (cli/cluster_views.py). Logs: ops/logs.py, outputs:
ops/outputs.py, GPU-hours: ops/usage.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.config_file import JOB_TYPE
from vdk.plugin.ml_training.k8s.runs.observe import RunDetail
from vdk.plugin.ml_training.k8s.runs.observe import inspect_run
from vdk.plugin.ml_training.k8s.runs.record import RunRecord
from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
from vdk.plugin.ml_training.k8s.runs.selection import select_jobs
from vdk.plugin.ml_training.k8s.runs.selection import where
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.runs.summary import node_range
from vdk.plugin.ml_training.ops import sweeps
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.scope import Scope
from vdk.plugin.ml_training.ops.scope import connected
from vdk.plugin.ml_training.ops.scope import execute_command
from vdk.plugin.ml_training.ops.scope import named_run
from vdk.plugin.ml_training.ops.scope import pick_run
from vdk.plugin.ml_training.ops.scope import select_runs
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.ops.usage import keep_usage

KIND_ML = JOB_TYPE  # `kind` of an ML job in JSON (`vdk list -o json` mixes them with data jobs)


# --- vdk list ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobEntry:
    """One (team, job) with runs: its runs (newest first), its phase, its team (None: runs without a team)."""

    runs: list[RunSummary]
    phase: str
    team: str | None
    sweep: dict | None = None  # the latest run is a sweep: its trials by state and the best metric (ops/sweeps.py)

    def to_dict(self) -> dict:
        """The job's latest run and how many it has."""
        latest = self.runs[0]
        return {
            "kind": KIND_ML,
            "job_name": latest.job_name,
            "job_team": self.team,
            "namespace": latest.namespace,
            "latest_run": latest.name,
            "backend": latest.backend,
            "phase": self.phase,
            "created": latest.created,
            "nodes": node_range(latest.nodes)[1],
            "nodes_min": node_range(latest.nodes)[0],
            "gpus_per_node": latest.gpus_per_node,
            "gpu_resource": latest.gpu_resource,
            "runs": len(self.runs),
            # the latest run's progress as its status says it (a TrainJob's Kubeflow status: no log request)
            "progress": latest.progress.to_dict() if latest.progress is not None else None,
            **({"sweep": self.sweep} if self.sweep is not None else {}),  # a sweep's job only
        }


@dataclass(frozen=True)
class JobListing:
    """The jobs of a namespace (of one team unless every team's were asked for)."""

    jobs: list[JobEntry]
    where: str  # "namespace ml (context lab)"
    team: str | None  # the team filter as a phrase ("of team vision"); None: every team
    teams_elsewhere: list[tuple[str, str]]  # (team, namespace) of teams that ml_training_team_namespaces puts elsewhere
    notes: list[str] = field(default_factory=list)  # what could not be listed (the rest is)

    def to_dict(self) -> list[dict]:
        return [job.to_dict() for job in self.jobs]


@checked
def list_jobs(scope: Scope, all_teams: bool = False, reporter: Reporter | None = None) -> JobListing:
    """Every (team, job) with runs in the scope's namespace, of the scope's team unless `all_teams`: one list
    per backend, whatever the number of runs (their phases are honest from the operators' status)."""
    from vdk.plugin.ml_training.job import teams

    choice = None if all_teams else scope.team
    client = connected(scope, reporter)
    notes: list[str] = []
    jobs = [
        JobEntry(job.runs, job.runs[0].phase, job.team_name, _sweep_summary(client, job.runs[0]))
        for job in select_jobs(client, choice, notes)
    ]
    mapped = teams.mapping(scope.settings, teams.TEAM_NAMESPACES)
    elsewhere = [(team, ns) for team, ns in mapped.entries if ns != client.namespace]
    return JobListing(jobs, where(client), choice.phrase() if choice else None, elsewhere, notes)


def _sweep_summary(client, run: RunSummary) -> dict | None:
    """A sweep's row of `vdk list`: its trials by state and the best metric so far (None: no sweep)."""
    if run.sweep is None:
        return None
    detail = sweeps.sweep_detail(client, run)
    settings = {"parallel": run.sweep.get("parallel")}  # how many trials at a time, as it was deployed
    if detail.table is None:
        return {**settings, "trials": run.sweep.get("trials"), "why": detail.why}
    return {**detail.table.summary(), **settings}


# --- vdk show, vdk execute --list / --show -----------------------------------------------------------------


@dataclass(frozen=True)
class JobDetail:
    """A job's runs (newest first) and the detail of the latest (or of the run asked for): its ranks, why it waits
    or failed, progress."""

    selection: JobSelection
    latest: RunDetail
    sweep: sweeps.SweepDetail | None = None  # the latest run is a sweep: its trial table

    @property
    def runs(self) -> list[RunSummary]:
        return self.selection.runs

    def to_dict(self) -> dict:
        client = self.selection.client
        return {
            "kind": KIND_ML,
            "job_name": self.selection.job_name,
            "job_team": self.selection.team_name,
            "namespace": client.namespace,
            "context": client.context,
            "runs": [r.to_dict() for r in self.runs],
            "latest": self.latest.to_dict(),
            **({"sweep": self.sweep.to_dict()} if self.sweep is not None else {}),  # a sweep's job only
        }


@checked
def show_job(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> JobDetail:
    """The scope's job: its runs and, for the latest (or the run `run_id`: its name or the part after the job
    name), every rank's state, why it waits or failed (events, Kueue, exit codes, the failing rank's last log
    lines), its progress and loss curve; a sweep's trial table."""
    command = "show" + (f" -i {run_id}" if run_id else "")
    selection, run = pick_run(scope, command, run_id, partial=True, reporter=reporter)
    sweep = sweeps.sweep_detail(selection.client, run) if run.sweep is not None else None
    detail = _with_data(selection.client, inspect_run(selection.client, run))
    return JobDetail(selection, _with_notes(detail, selection.notes), sweep)


@checked
def list_runs(scope: Scope, reporter: Reporter | None = None) -> list[RunSummary]:
    """The runs of the scope's job, newest first (a list that failed is a note of `reporter`)."""
    selection = select_runs(scope, execute_command("list"), partial=True, reporter=reporter)
    for note in selection.notes:
        or_quiet(reporter).note(f"note: {note}")
    return selection.runs


@checked
def show_run(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> RunDetail:
    """One run's detail with its diagnosis: `run_id` is its name or the part after the job name; default
    the latest run."""
    selection, run = pick_run(scope, execute_command("show", run_id), run_id, partial=True, reporter=reporter)
    return _with_notes(_with_data(selection.client, inspect_run(selection.client, run)), selection.notes)


def _with_data(client, detail: RunDetail) -> RunDetail:
    """`detail` with the datasets its run trained on, each at the version its record pinned (one request: the
    record); a record that cannot be read is a note, and the rest is shown."""
    from vdk.plugin.ml_training.ops.run_changes import RunState

    try:
        record = client.read_run_record(detail.run.name)
    except MLTrainingError as e:
        detail.notes.append(f"the datasets it trained on: its run record cannot be read ({e.problem})")
        return detail
    return dataclasses.replace(detail, data=RunState.from_record(record).data)


def _with_notes(detail: RunDetail, notes: list[str]) -> RunDetail:
    """`detail` with the selection's notes first (what could not be listed: its runs may be missing)."""
    detail.notes[:0] = notes
    return detail


# --- vdk execute --start / --cancel, vdk delete ------------------------------------------------------------


@dataclass(frozen=True)
class Rerun:
    """A past run started again: its record's image digest and manifests, a new run name."""

    selection: JobSelection
    source: RunSummary  # the run it repeats
    run_name: str
    record: RunRecord  # the source's
    created: list[str]  # Kind/name of what was created
    continues: str | None = None  # the run whose outputs it begins with (--from)

    def to_dict(self) -> dict:
        return {
            "job_name": self.selection.job_name,
            "job_team": self.selection.team_name,
            "run": self.run_name,
            "rerun_of": self.source.name,
            "continues": self.continues,
            "backend": self.record.backend,
            "image": self.record.image,
            "namespace": self.selection.client.namespace,
            "created": list(self.created),
        }


@checked
def rerun(
    scope: Scope,
    run_id: str | None = None,
    reason: str | None = None,
    reporter: Reporter | None = None,
    from_run: str | None = None,
) -> Rerun:
    """Run a past run of the scope's job again exactly (default the latest; with `from_run`, that run): same image
    digest, manifests and dataset versions, a new run name; `reason` goes to its audit trail. With `from_run`, the
    new run continues that ended run: its working directory begins with that run's outputs (on the same claim) and
    its frameworks resume from that run's checkpoints. Created exactly once or not at all, as a deploy's run (what
    an interruption left is a note of `reporter`)."""
    from vdk.plugin.ml_training.k8s.runs import continuation as run_continuation
    from vdk.plugin.ml_training.k8s.runs import record as run_record
    from vdk.plugin.ml_training.k8s.runs.identity import new_run_name
    from vdk.plugin.ml_training.source import audit

    command = execute_command("start", run_id) + (f" --from {from_run}" if from_run is not None else "")
    selection = select_runs(scope, command, reporter=reporter)
    gone = from_run is not None and _gone(selection, from_run)
    source = named_run(selection, run_id if from_run is None or run_id or gone else from_run, command)
    continued = None
    if from_run is not None and gone:  # cancelled or deleted: only its outputs on the claim may be left
        continued = _continued_gone(selection, from_run, source, reporter)
    elif from_run is not None:
        continued = named_run(selection, from_run, command)
        _can_continue(continued, source, selection.job_name)
    client, name = selection.client, selection.job_name
    rec = client.read_run_record(source.name)
    run_name = new_run_name(name)
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    manifests = run_record.rerun_manifests(rec, run_name, audit.deployer(), now, reason)
    if continued is not None:
        manifests = run_continuation.continuing(manifests, run_name, continued.name)
    created = client.apply(manifests, or_quiet(reporter).note)
    kinds = [f"{m['kind']}/{m['metadata']['name']}" for m in created]
    return Rerun(selection, source, run_name, rec, kinds, continued.name if continued is not None else None)


def _gone(selection: JobSelection, from_run: str) -> bool:
    """Whether `from_run` names no run the cluster still has (of this team or another's)."""
    wanted = from_run if from_run.startswith(f"{selection.job_name}-") else f"{selection.job_name}-{from_run}"
    runs = [*selection.runs, *(run for other in selection.others for run in other.runs)]
    return bool(from_run.strip()) and all(run.name != wanted for run in runs)


def _continued_gone(
    selection: JobSelection, from_run: str, source: RunSummary, reporter: Reporter | None
) -> RunSummary:
    """A run that is gone (`vdk execute --cancel` deleted it with its record): its name as a run of this job, its
    outputs where `source`'s manifests write (the same claim), a note that says so."""
    from vdk.plugin.ml_training.k8s.runs.identity import is_run_of

    name = selection.job_name
    wanted = from_run if from_run.startswith(f"{name}-") else f"{name}-{from_run}"
    if not is_run_of(wanted, name):
        raise MLTrainingError(
            f"{from_run!r} names no run of {selection.describe()}, in the cluster or gone",
            f"name a run of it, in full or the part after `{name}-` (`vdk execute --list -n {name}` lists those "
            "still in the cluster)",
        )
    if source.outputs is None:
        raise MLTrainingError(
            f"{source.name}'s manifests keep no outputs (no output_pvc): a run started from them cannot begin with "
            f"{wanted}'s",
            f"name a run deployed with output_pvc with -i, e.g. `vdk execute --start -n {name} -i RUN --from {wanted}`",
        )
    claim = source.outputs.get("claim")
    or_quiet(reporter).note(
        f"{wanted} is not in the cluster any more (cancelled or deleted): the new run begins with what its directory "
        f"of claim {claim} still holds (nothing, if it is gone too)"
    )
    return dataclasses.replace(source, name=wanted, phase="Gone")


def _can_continue(continued: RunSummary, source: RunSummary, job: str) -> None:
    """A run continues one that ended and kept its outputs, on the claim it writes to itself."""
    if continued.outputs is None:
        raise MLTrainingError(
            f"{continued.name} kept no outputs (it ran without output_pvc): there is nothing to continue from",
            f"start it again from the first step: `vdk execute --start -n {job} -i {continued.name}`; set output_pvc "
            "so that later runs can be continued",
        )
    if not continued.finished:
        raise MLTrainingError(
            f"{continued.name} has not ended ({continued.phase}): a run that continues it would begin with outputs "
            "it is still writing",
            f"wait for it to end, or stop it first: `vdk execute --cancel -n {job} -i {continued.name}`",
        )
    if source.outputs is None or source.outputs.get("claim") != continued.outputs.get("claim"):
        where = f"claim {source.outputs['claim']}" if source.outputs else "no output claim"
        raise MLTrainingError(
            f"{source.name}'s manifests write to {where}, {continued.name}'s outputs are on claim "
            f"{continued.outputs.get('claim')}: a run begins with another's outputs on the same claim only",
            f"continue it from its own manifests: `vdk execute --start -n {job} --from {continued.name}` (without -i)",
        )


@dataclass(frozen=True)
class CancelledRun:
    """A run stopped and deleted, with what was deleted (`Kind/name`)."""

    selection: JobSelection
    run: RunSummary  # as it was before
    deleted: list[str]

    def to_dict(self) -> dict:
        return {
            "job_name": self.selection.job_name,
            "job_team": self.selection.team_name,
            "run": self.run.name,
            "phase": self.run.phase,
            "deleted": list(self.deleted),
        }


@checked
def cancel_run(scope: Scope, run_id: str | None = None, reporter: Reporter | None = None) -> CancelledRun:
    """Stop the run `run_id` of the scope's job (default the latest, which must not have ended) and delete it;
    its GPU-hours stay counted (ops/usage.py; a warning of `reporter` when they cannot)."""
    selection, run = pick_run(scope, execute_command("cancel", run_id), run_id, changes=True, reporter=reporter)
    name = selection.job_name
    if run_id is None and run.finished:
        raise MLTrainingError(
            f"the latest run of {selection.describe()}, {run.name}, has ended ({run.phase}): nothing to cancel",
            f"name the run to cancel with -i (`vdk execute --list -n {name}` lists them); `vdk delete -n {name}` "
            "deletes the job's runs",
        )
    _keep_usage(selection, [run], or_quiet(reporter))
    return CancelledRun(selection, run, selection.client.delete_run(run.name, run.backend))


@checked
def select_for_deletion(scope: Scope, reporter: Reporter | None = None) -> JobSelection:
    """The runs `delete_runs` would delete: every run of the scope's (team, job); another team's runs only
    when that team was named."""
    return select_runs(scope, "delete", changes=True, reporter=reporter)


@dataclass(frozen=True)
class DeletedRuns:
    """What `vdk delete` deleted: the runs of the job it selected (`selection.others`: those of other teams,
    kept), and the runs deleted (none when the deletion was not confirmed)."""

    selection: JobSelection
    deleted: list[RunSummary]


def delete_job(
    scope: Scope, confirm: Callable[[JobSelection], bool] | None = None, reporter: Reporter | None = None
) -> DeletedRuns:
    """`vdk delete`: every run of the scope's (team, job) deleted, once `confirm(selection)` (default: yes) says
    so; another team's runs only when that team was named. Each run deleted is an event of `reporter`."""
    selection = select_for_deletion(scope, reporter)
    if confirm is not None and not confirm(selection):
        return DeletedRuns(selection, [])
    return DeletedRuns(selection, delete_runs(selection, reporter))


def delete_runs(selection: JobSelection, reporter: Reporter | None = None) -> list[RunSummary]:
    """Delete every run of `selection` (running ones stop) and their records; `reporter.run_deleted(run)` after
    each. Their GPU-hours stay counted (a warning of `reporter` when they cannot). Returns the runs deleted."""
    reporter = or_quiet(reporter)
    _keep_usage(selection, selection.runs, reporter)
    done: list[RunSummary] = []
    for i, run in enumerate(selection.runs):
        try:
            selection.client.delete_run(run.name, run.backend)
        except MLTrainingError as e:
            left = [r.name for r in selection.runs[i + 1 :]]
            raise MLTrainingError(
                f"{e.problem}\n"
                + (f"Deleted before that: {', '.join(r.name for r in done)}. " if done else "No run was deleted. ")
                + (f"Not deleted yet: {', '.join(left)}." if left else ""),
                f"{e.fix}\nThe same command again deletes what remains of {selection.describe()}",
            ) from e
        done.append(run)
        reporter.run_deleted(run)
    return done


def _keep_usage(selection: JobSelection, runs: list[RunSummary], reporter: Reporter) -> None:
    """Before runs are deleted: their GPU-hours stay in `vdk list --usage` (a warning when they cannot)."""
    from vdk.plugin.ml_training.source import audit

    for problem in keep_usage(selection.client, runs, audit.deployer()):
        reporter.note(f"warning: {problem}")
