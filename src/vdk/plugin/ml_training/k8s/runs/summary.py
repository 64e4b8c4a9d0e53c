"""A run's phase and summary, read from its main object (whose backend says what its status means)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.runs import identity as run_meta
from vdk.plugin.ml_training.k8s.storage.output_location import location_of
from vdk.plugin.ml_training.runtime.progress_lines import Progress
from vdk.plugin.ml_training.vocabulary.nvidia import GPU_RESOURCE
from vdk.plugin.ml_training.vocabulary.nvidia import MIG_RESOURCE_PREFIX

PENDING = "Pending"
QUEUED = "Queued"  # suspended by Kueue until its queue admits it
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
RESTARTING = "Restarting"
STALLED = "Stalled"  # failed because the stall watchdog stopped a rank that took no optimizer step
FINISHED = (SUCCEEDED, FAILED)
# A run that has not ended: it may yet succeed (`vdk deploy --if-changed` does not start its twin).
NOT_ENDED = (PENDING, QUEUED, SUSPENDED, RUNNING, RESTARTING)

# Extended resources that are accelerators, by prefix.
AMD_GPU_RESOURCE = "amd.com/gpu"
ACCELERATOR_PREFIXES = (GPU_RESOURCE, MIG_RESOURCE_PREFIX, AMD_GPU_RESOURCE, "gpu.intel.com/")


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
    image_digest: str | None = None
    git_dirty: bool | None = None
    deployed_at: str | None = None
    rerun_of: str | None = None
    continues: str | None = None  # the run whose outputs it began with (vdk execute --start --from)
    queue: str | None = None
    nodes: str | None = None  # "4", or "2:8" for an elastic range
    gpus_per_node: int = 0
    gpu_resource: str | None = None  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...
    uid: str | None = None
    team_label: str | None = None  # the `vdk.io/team` label value; None for runs without one
    started: str | None = None  # when its operator started it (None while queued, or never)
    ended: str | None = None  # when it succeeded or failed
    kept_seconds: int | None = None  # how long it is kept after it ends (ttl_after_finished); None: until deleted
    outputs: dict | None = (
        None  # {"claim", "directory"}: where its outputs persist (k8s/storage/output_location.py); None: nowhere
    )
    sweep: dict | None = None  # a hyperparameter sweep's settings (trials, parallel, metric, goal); None: a run
    from_sweep: dict | None = None  # a run started from a sweep's trial: {"sweep", "trial"}
    overrides: str | None = None  # the [ml-training] keys given for this run only (`--set`, `--args`)
    progress: Progress | None = None  # as its own status says it (its backend's `progress`): no log request

    def to_dict(self) -> dict:
        """JSON of the run: numbers as numbers (`nodes` the node count, the maximum of an elastic range, and
        `nodes_min` its minimum: equal for a fixed size)."""
        out = {}
        for key, value in self.__dict__.items():
            out[key] = value
            if key == "nodes":
                out["nodes_min"], out["nodes"] = node_range(value)
            if key == "progress":
                out[key] = value.to_dict() if value is not None else None
        return out

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def shape(self) -> str:
        return shape_text(self.nodes, self.gpus_per_node, self.gpu_resource)


def node_range(nodes: str | None) -> tuple[int | None, int | None]:
    """(minimum, maximum) node count of "4" or an elastic "2:8"; (None, None) when unknown."""
    try:
        low, _, high = (nodes or "").partition(":")
        return int(low), int(high or low)
    except ValueError:
        return None, None


def shape_text(nodes: str | None, gpus_per_node: int, gpu_resource: str | None) -> str:
    """ "2 x 8 GPU", "1 x 2 mig-1g.10gb", "1 x CPU"."""
    nodes = nodes or "?"
    if not gpus_per_node:
        return f"{nodes} x CPU"
    what = "GPU" if gpu_resource in (None, GPU_RESOURCE, AMD_GPU_RESOURCE) else gpu_resource.split("/")[-1]
    return f"{nodes} x {gpus_per_node} {what}"


def summarize(obj: dict) -> RunSummary:
    metadata = obj.get("metadata", {})
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    phase, message = run_phase(obj)
    queue = labels.get(run_meta.KUEUE_QUEUE_LABEL)
    if phase == SUSPENDED and queue:
        phase = QUEUED
    backend = backends.of_object(obj)
    if phase in (RUNNING, RESTARTING) and backend is not None and backend.starting(obj):
        phase = PENDING  # honest: the operator says Running while ranks cannot start yet
    nodes, gpus, gpu_resource = shape(obj)
    commit = annotations.get(run_meta.ANNOTATION_GIT_COMMIT)
    # Earlier versions annotated git-dirty "false" outside git too: without a commit it means nothing.
    dirty = annotations.get(run_meta.ANNOTATION_GIT_DIRTY) if commit else None
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
        git_commit=commit,
        reason=annotations.get(run_meta.ANNOTATION_REASON),
        message=message,
        image_digest=annotations.get(run_meta.ANNOTATION_IMAGE_DIGEST),
        git_dirty=None if dirty is None else dirty == "true",
        deployed_at=annotations.get(run_meta.ANNOTATION_DEPLOYED_AT),
        rerun_of=annotations.get(run_meta.ANNOTATION_RERUN_OF),
        continues=annotations.get(run_meta.ANNOTATION_CONTINUES),
        queue=queue,
        nodes=nodes,
        gpus_per_node=gpus,
        gpu_resource=gpu_resource,
        uid=metadata.get("uid"),
        team_label=labels.get(run_meta.LABEL_TEAM),
        started=started_at(obj),
        ended=ended_at(obj),
        kept_seconds=backend.kept_after_finished(obj) if backend is not None else None,
        outputs=_outputs(obj),
        sweep=_json(annotations.get(run_meta.ANNOTATION_SWEEP)),
        from_sweep=_json(annotations.get(run_meta.ANNOTATION_FROM_SWEEP)),
        overrides=annotations.get(run_meta.ANNOTATION_OVERRIDES),
        progress=backend.progress(obj) if backend is not None else None,
    )


def _json(text: str | None) -> dict | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _outputs(obj: dict) -> dict | None:
    location = location_of(obj.get("spec") or {})
    return location.to_dict() if location is not None else None


def started_at(obj: dict) -> str | None:
    """When the run started: its operator's start time (a backend that records none: its creation, unless it is
    still suspended)."""
    status = obj.get("status") or {}
    if status.get("startTime"):
        return status["startTime"]
    backend = backends.of_object(obj)
    if backend is None or backend.records_start_time:
        return None  # not started yet
    if run_phase(obj)[0] in (SUSPENDED, PENDING):
        return None
    return (obj.get("metadata") or {}).get("creationTimestamp")


def ended_at(obj: dict) -> str | None:
    """When the run succeeded or failed: its completion time, else when that condition became true."""
    status = obj.get("status") or {}
    phase, _ = run_phase(obj)
    if phase not in FINISHED:
        return None
    if status.get("completionTime"):
        return status["completionTime"]
    ends = [
        c.get("lastTransitionTime")
        for c in status.get("conditions") or []
        if c.get("type") in ("Failed", "Succeeded", "Complete") and str(c.get("status")) == "True"
    ]
    return min(filter(None, ends), default=None)


def run_phase(obj: dict) -> tuple[str, str | None]:
    """(phase, message of the deciding condition) from a run's main object."""
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
    backend = backends.of_object(obj)
    if backend is not None and backend.suspended(obj):
        return SUSPENDED, None
    if backend is not None and backend.running(obj):
        return RUNNING, None
    return PENDING, None


def shape(obj: dict) -> tuple[str | None, int, str | None]:
    """(nodes, accelerators per node, accelerator resource) as the run's object requests them."""
    backend = backends.of_object(obj)
    if backend is None:
        return None, 0, None
    nodes, resources = backend.shape(obj)
    return (nodes, *accelerators(resources))


def accelerators(resources: dict) -> tuple[int, str | None]:
    """(count, resource name) of the accelerator in a container's limits (or requests)."""
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if name.startswith(ACCELERATOR_PREFIXES):
                try:
                    return int(str(value)), name
                except ValueError:
                    return 0, name
    return 0, None
