"""What the launcher (ops/cs_launch.py) reads of itself: the VDK Control Service runs each execution of a job as a
Kubernetes Job named after the execution, from its data-job template, in its data-jobs namespace, and this process
is that Job's pod. Its Job says the template's deadline (`activeDeadlineSeconds`, from the Job's start), whether a
schedule started it, and whether it is being deleted (the Control Service cancels an execution by deleting its Job:
the pod gets SIGTERM while its Job has a deletion time); its pod says the image it runs, by digest.

Reading them takes `get` on `jobs` and `pods` in the data-jobs namespace (docs/control-service-operator.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.resources import JOB
from vdk.plugin.ml_training.k8s.resources import POD

# The Control Service's annotation of how an execution was started (`scheduled` by its CronJob, else `manual`).
EXECUTION_TYPE = "com.vmware.taurus/execution-type"
SCHEDULED = "scheduled"
# The launcher leaves this long before the template's deadline (a tenth of it, within these bounds, and never more
# than half): the kubelet would kill it there, and the Control Service would then count the execution as failed,
# with nothing said. The least covers a poll of the run (ops/follow.py) and writing the termination message.
LEAVE_MARGIN_SECONDS = 300
LEAVE_MARGIN_MIN_SECONDS = 10


@dataclass(frozen=True)
class OwnJob:
    """The Kubernetes Job of this execution, as far as the launcher needs it."""

    name: str
    namespace: str
    deadline_seconds: int | None  # activeDeadlineSeconds of the template; None: none
    started: float | None  # status.startTime as time.time(); None: not said
    scheduled: bool  # the Control Service's schedule started it (else a manual start, or a deploy)
    deleting: bool  # being deleted: the execution was cancelled

    @property
    def leave_at(self) -> float | None:
        """When the launcher stops following (a time.time()): its margin before the deadline; None: no deadline."""
        if self.deadline_seconds is None or self.started is None:
            return None
        return self.started + self.deadline_seconds - leave_margin(self.deadline_seconds)


def leave_margin(deadline_seconds: int) -> float:
    """How long before a deadline of `deadline_seconds` the launcher leaves."""
    margin = min(LEAVE_MARGIN_SECONDS, max(LEAVE_MARGIN_MIN_SECONDS, deadline_seconds / 10))
    return min(margin, deadline_seconds / 2)


def read_own_job(client: KubeClient, name: str) -> OwnJob | None:
    """The Job `name` in the client's namespace (the pod's own), None when there is none (a launcher started by
    hand, outside the Control Service). Raises KubeApiError when it cannot be read."""
    try:
        job = client.transport.request(
            "GET", JOB.path(client.namespace, name), action=JOB.action("get", client.namespace, name)
        )
    except KubeApiError as e:
        if e.status == 404 and not e.not_served:
            return None
        raise
    return parse_own_job(job, client.namespace)


def parse_own_job(job: dict, namespace: str) -> OwnJob:
    metadata = job.get("metadata") or {}
    spec = job.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    started = (job.get("status") or {}).get("startTime")
    annotations = metadata.get("annotations") or {}
    return OwnJob(
        name=metadata.get("name", ""),
        namespace=namespace,
        deadline_seconds=int(deadline) if deadline is not None else None,
        started=_epoch(started) if started else None,
        scheduled=annotations.get(EXECUTION_TYPE) == SCHEDULED,
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def own_image(client: KubeClient, pod: str, container: str) -> str | None:
    """The image the pod's container `container` (else its first) runs, by digest when the kubelet says which it
    pulled (`imageID`), else as the pod names it; None when the pod is not found."""
    try:
        found = client.transport.request(
            "GET", POD.path(client.namespace, pod), action=POD.action("get", client.namespace, pod)
        )
    except KubeApiError as e:
        if e.status == 404 and not e.not_served:
            return None
        raise
    return image_of(found, container)


def image_of(pod: dict, container: str) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    chosen = next((c for c in containers if c.get("name") == container), containers[0] if containers else None)
    if chosen is None or not chosen.get("image"):
        return None
    image = str(chosen["image"])
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == chosen.get("name")), None)
    image_id = str((status or {}).get("imageID") or "")
    if "@sha256:" not in image_id:
        return image
    digest = image_id.rsplit("@", 1)[1]
    return f"{_repository(image)}@{digest}"


def _repository(image: str) -> str:
    """`host/path/name` of `host/path/name:tag` or `...@sha256:...` (a port's colon is kept)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
