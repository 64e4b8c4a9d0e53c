"""What a backend is (`Backend`: everything the plugin knows about one kind of training job) and what
discovery found in a cluster (`Discovery`). A backend module implements `Backend` once; the registry
(this package's __init__) is where the rest of the plugin looks backends up."""

from __future__ import annotations

from abc import ABC
from abc import abstractmethod
from collections.abc import Collection
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import ClassVar
from typing import Protocol

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.runtime.progress_lines import Progress

# The index of a pod of an Indexed Job (a label, and an annotation on older clusters); the JobSet
# under a TrainJob makes Indexed Jobs too.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The pod condition Kubernetes (1.26+) sets on a pod it stops for a reason other than the pod's own: preemption,
# an eviction (the Eviction API, a drain, the kubelet under node pressure), a taint-based eviction, a lost node.
DISRUPTION_TARGET = "DisruptionTarget"


@dataclass(frozen=True)
class Discovery:
    """The parts of a cluster's API that matter for choosing and rendering a backend."""

    # (group/version, plural) of every served resource of the backends' API groups, e.g. ("batch/v1", "jobs").
    resources: frozenset[tuple[str, str]]
    server_version: str | None = None
    notes: tuple[str, ...] = ()
    # What a backend's own discovery found (`Backend.discover`), by backend name.
    facts: Mapping[str, Any] = field(default_factory=dict)

    def serves(self, rtype: ResourceType) -> bool:
        return (rtype.api_version, rtype.plural) in self.resources


class ApiReader(Protocol):
    """The reads a backend's own discovery may make."""

    def get_tolerant(
        self, path: str, action: Action, tolerate: Collection[int] = (403, 404)
    ) -> tuple[Any, KubeApiError | None]: ...


class Backend(ABC):
    """One kind of training job a run can be: how it is rendered, found, observed and chosen."""

    name: ClassVar[str]  # `backend` in config.ini, and the run's vdk.io/backend label
    main: ClassVar[ResourceType]  # the run's main object: every other object of the run is owned by it
    creates: ClassVar[tuple[ResourceType, ...]]  # every type `render` returns, the main one first
    container: ClassVar[str]  # the training container in the run's pods
    elastic: ClassVar[bool] = False  # runs `nodes = MIN:MAX` as an elastic range
    operator: ClassVar[bool] = True  # needs an operator installed in the cluster
    records_start_time: ClassVar[bool] = True  # its status has `startTime` once the run started
    install: ClassVar[str] = ""  # what to install when the cluster does not serve it
    # Its place among the ready backends when a job asks for `backend = auto` (lower first).
    auto_preference: ClassVar[int] = 100
    # Whether a disruption (DisruptionTarget: preemption, eviction, a lost node) of one of its pods is replaced
    # without counting against max_restarts; False where the runtime's own failure policy decides (TrainJob).
    disruptions_free: ClassVar[bool] = True

    @property
    def title(self) -> str:
        """The main object's kind, as users read it in messages."""
        return self.main.kind

    def no_pods_yet(self, run_name: str, namespace: str | None) -> tuple[str, str]:
        """(why a run that has no pods and no warning has none, what to check if that lasts)."""
        return (
            f"the {self.title} operator has not created them",
            "if this lasts, check that the training operator is running "
            "(`kubectl get pods -A | grep -i -e training -e trainer`)",
        )

    # --- rendering ---------------------------------------------------------------------------------

    @abstractmethod
    def render(
        self, spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, cluster: Discovery | None
    ) -> list[dict]:
        """The run's objects, main object first; `cluster` is None when no cluster was asked (dry run)."""

    def limitations(self, spec: MLJobSpec, cluster: Discovery | None) -> list[str]:
        """What of the spec this backend cannot honour, for the deploy command to say."""
        return []

    # --- observing -----------------------------------------------------------------------------------

    @abstractmethod
    def pod_selector(self, run_name: str) -> str:
        """Label selector of a run's training pods (for logs and events)."""

    def rank_of(self, pod: dict) -> tuple[int | None, str]:
        """(node rank, label) of one of the run's pods; (None, a name) for pods that are not a rank."""
        return completion_index_rank(pod)

    def running(self, obj: dict) -> bool:
        """Whether the main object's status shows active pods where its conditions do not say Running."""
        return False

    def starting(self, obj: dict) -> bool | None:
        """Whether the main object's status says some of its training pods are not running yet (pending,
        pulling their image); None when it cannot tell. Lets `vdk list` show an honest phase without
        reading pods."""
        return None

    def suspended(self, obj: dict) -> bool:
        """Whether the main object is suspended (by Kueue, until its queue admits it)."""
        return (obj.get("spec") or {}).get("suspend") is True

    def kept_after_finished(self, obj: dict) -> int | None:
        """Seconds the finished run is kept before its TTL deletes it; None: until someone deletes it."""
        return None

    def progress(self, obj: dict) -> Progress | None:
        """The training's progress as the main object's status says it (no log request); None: it says none."""
        return None

    @abstractmethod
    def shape(self, obj: dict) -> tuple[str, dict]:
        """(nodes, e.g. "4" or "2:8", resources of a node's training container) as the main object asks."""

    # --- choosing ------------------------------------------------------------------------------------

    def discover(self, api: ApiReader, notes: list[str]) -> Any:
        """What else this backend needs to know of a cluster that serves it (kept in `Discovery.facts`)."""
        return None

    def unavailable(self, cluster: Discovery) -> MLTrainingError | None:
        """Why the cluster cannot run this backend when it is asked for by name; None if it can."""
        if cluster.serves(self.main):
            return None
        return MLTrainingError(
            f"backend = {self.name}, but the cluster does not serve {self.title} ({self.main.api_version})",
            f"{self.install}; or set backend = auto to use what the cluster has",
        )

    def ready(self, cluster: Discovery) -> bool:
        """Whether `backend = auto` may choose it: certainly usable, not merely not refused."""
        return self.unavailable(cluster) is None

    def passed_over(self, cluster: Discovery) -> str | None:
        """Why `auto` did not choose it although the cluster serves it, when that needs saying."""
        return None


def completion_index_rank(pod: dict) -> tuple[int | None, str]:
    """(index, label) of a pod of an Indexed Job; (None, its name) without an index."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    index = as_int(labels.get(COMPLETION_INDEX) or annotations.get(COMPLETION_INDEX))
    return (index, str(index)) if index is not None else (None, metadata.get("name", "?"))


def first_container(template: dict) -> dict:
    """The first container of a pod template."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    return containers[0]


def as_int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
