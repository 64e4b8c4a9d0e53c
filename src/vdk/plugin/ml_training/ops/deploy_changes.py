"""What a deploy changes: the state of the run about to start (its code layer's manifest, the packages of its
dependency layer, its configuration, its base image by digest, its datasets pinned) against the job's last run
and its last successful one, read from their records (ops/run_changes.py compares). `vdk deploy` shows the first
before it starts the run; `vdk deploy --if-changed` starts nothing when the second shows no change, or when a run
that has not ended yet (pending, queued, running) is the same (`with_active`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.ops.run_changes import RunChanges
from vdk.plugin.ml_training.ops.run_changes import RunState
from vdk.plugin.ml_training.ops.run_changes import changes_between

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary


@dataclass(frozen=True)
class Changes:
    """This deploy against the job's last run (`since_last`) and its last successful one (`since_success`);
    None where there is no such run."""

    last: RunSummary | None
    since_last: RunChanges | None
    last_success: RunSummary | None
    since_success: RunChanges | None
    same_active: RunSummary | None = None  # a run not ended yet that this deploy would repeat (`with_active`)

    @property
    def unchanged_since_success(self) -> bool:
        return self.since_success is not None and not self.since_success.changed

    @property
    def repeats(self) -> RunSummary | None:
        """The run this deploy would repeat: one not ended yet of the same state, else the last successful one
        when nothing changed since; None: something changed (or there is no run to compare with)."""
        return self.same_active or (self.last_success if self.unchanged_since_success else None)

    def to_dict(self) -> dict:
        return {
            "last_run": self.last.name if self.last else None,
            "last_phase": self.last.phase if self.last else None,
            "since_last": self.since_last.to_dict() if self.since_last else None,
            "last_successful_run": self.last_success.name if self.last_success else None,
            "since_last_success": self.since_success.to_dict() if self.since_success else None,
            "same_active_run": self.same_active.name if self.same_active else None,
        }


def current_state(
    spec: MLJobSpec,
    data: tuple[DataPin, ...],
    dependencies: tuple[tuple[str, str], ...],
    base: str | None,
    code: dict[str, str] | None = None,
) -> RunState:
    """The run a deploy is about to start, as its record will say it."""
    from vdk.plugin.ml_training.image.code_manifest import code_manifest

    return RunState(
        run=None,
        code=code if code is not None else code_manifest(spec.job_dir),
        dependencies=dict(dependencies),
        config=spec.to_dict(),
        base=base,
        data=tuple(data),
    )


def previous_runs(client: KubeClient, spec: MLJobSpec) -> list[RunSummary]:
    """The runs of this job and team in the namespace, newest first (records whose run's creation never completed
    settled first: k8s/runs/pending_records.py)."""
    from vdk.plugin.ml_training.job.teams import team_label
    from vdk.plugin.ml_training.k8s.runs import pending_records

    pending_records.settle(client, spec.kubernetes_name())
    label = team_label(spec.team) if spec.team else None
    return client.list_runs(job_name=spec.kubernetes_name(), team=label, unteamed=label is None)


def run_state(client: KubeClient, run: RunSummary) -> RunState:
    """A past run's state: its record, with what its pods reported of its claims."""
    from vdk.plugin.ml_training.k8s.storage.data_reports import keep_in_record
    from vdk.plugin.ml_training.k8s.storage.data_reports import reported_manifests

    record = client.read_run_record(run.name)
    needs_manifests = any(p.scheme == "pvc" and not p.manifest for p in record.data) or (
        not record.data and (record.spec.get("mounts") or record.spec.get("data"))
    )
    manifests = reported_manifests(client, run.name, run.backend) if needs_manifests else {}
    if manifests and record.data:
        keep_in_record(client, run.name, manifests)
    return RunState.from_record(record, manifests)


def changes(client: KubeClient, spec: MLJobSpec, state: RunState, with_active: bool = False) -> Changes:
    """This deploy's `state` against the job's last run and last successful run (a run whose record cannot be
    read is compared as unknown: every part changed); `with_active`: also against each run that has not ended yet
    (pending, queued, running), the first of the same state in `same_active`."""
    from vdk.plugin.ml_training.k8s.runs.summary import NOT_ENDED
    from vdk.plugin.ml_training.k8s.runs.summary import SUCCEEDED

    runs = previous_runs(client, spec)
    last = runs[0] if runs else None
    success = next((r for r in runs if r.phase == SUCCEEDED), None)
    since_last = _against(client, last, state) if last else None
    same_active = None
    if with_active:
        for run in (r for r in runs if r.phase in NOT_ENDED):
            since = since_last if run is last else _against(client, run, state)
            if since is not None and not since.changed:
                same_active = run
                break
    if success is None:
        return Changes(last, since_last, None, None, same_active)
    since_success = since_last if success is last else _against(client, success, state)
    return Changes(last, since_last, success, since_success, same_active)


def _against(client: KubeClient, run: RunSummary, state: RunState) -> RunChanges:
    try:
        before = run_state(client, run)
    except MLTrainingError as e:
        before = RunState(run.name, None, None, None, None)
        changes = changes_between(before, state)
        changes.unknown.insert(0, f"the record of {run.name} cannot be read ({e.problem.splitlines()[0]})")
        return changes
    return changes_between(before, state)
