"""A run's phase and summary, read from its main object (PyTorchJob, TrainJob or Job)."""
from __future__ import annotations

from dataclasses import dataclass

from vdk.plugin.ml_training.k8s import run as run_meta

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
RESTARTING = "Restarting"


@dataclass(frozen=True)
class RunSummary:
    name: str
    job_name: str | None
    team: str | None
    backend: str | None
    namespace: str | None
    phase: str
    created: str | None
    image: str | None
    deployer: str | None
    git_commit: str | None
    reason: str | None
    message: str | None  # the latest condition's message (why it failed, for instance)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(obj: dict) -> RunSummary:
    metadata = obj.get("metadata", {})
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    phase, message = run_phase(obj)
    return RunSummary(
        name=metadata.get("name", ""),
        job_name=labels.get(run_meta.LABEL_JOB),
        team=annotations.get(run_meta.ANNOTATION_TEAM) or labels.get(run_meta.LABEL_TEAM),
        backend=labels.get(run_meta.LABEL_BACKEND),
        namespace=metadata.get("namespace"),
        phase=phase,
        created=metadata.get("creationTimestamp"),
        image=annotations.get(run_meta.ANNOTATION_IMAGE),
        deployer=annotations.get(run_meta.ANNOTATION_DEPLOYER),
        git_commit=annotations.get(run_meta.ANNOTATION_GIT_COMMIT),
        reason=annotations.get(run_meta.ANNOTATION_REASON),
        message=message,
    )


def run_phase(obj: dict) -> tuple[str, str | None]:
    """(phase, message of the deciding condition) from a PyTorchJob, TrainJob or Job."""
    status = obj.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if str(c.get("status")) == "True"]
    by_type = {c.get("type"): c for c in conditions}
    for kinds, phase in (
        (("Failed",), FAILED),
        (("Succeeded", "Complete"), SUCCEEDED),
        (("Suspended",), SUSPENDED),
        (("Restarting",), RESTARTING),
        (("Running",), RUNNING),
    ):
        for kind in kinds:
            if kind in by_type:
                return phase, by_type[kind].get("message")
    if obj.get("kind") == "Job" and (status.get("active") or 0) > 0:
        return RUNNING, None
    if any((j.get("active") or 0) > 0 for j in status.get("jobsStatus") or []):  # TrainJob
        return RUNNING, None
    if (obj.get("spec") or {}).get("suspend") is True:
        return SUSPENDED, None
    return PENDING, None
