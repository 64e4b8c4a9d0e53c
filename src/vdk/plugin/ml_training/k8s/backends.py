"""What a cluster serves (`Discovery`) and which backend runs a job there (`choose_backend`)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s import pytorchjob
from vdk.plugin.ml_training.k8s import trainjob

PYTORCHJOB = "pytorchjob"
TRAINJOB = "trainjob"
JOB = "job"
BACKENDS = (PYTORCHJOB, TRAINJOB, JOB)

INSTALL_TRAINING_OPERATOR = (
    "install the Kubeflow Training Operator v1 (it serves PyTorchJob): "
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"'
)
INSTALL_TRAINER = (
    "install Kubeflow Trainer v2 (it serves TrainJob; needs JobSet): see "
    "https://www.kubeflow.org/docs/components/trainer/operator-guides/installation/"
)
INSTALL_TORCH_RUNTIME = (
    "install Trainer's default runtimes (they include the torch-distributed ClusterTrainingRuntime): "
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref=<your Trainer version>"'
)


@dataclass(frozen=True)
class Discovery:
    """The parts of a cluster's API that matter for choosing and rendering a backend."""

    # (group/version, plural) of every served resource of the groups we looked at, e.g. ("batch/v1", "jobs").
    resources: frozenset[tuple[str, str]]
    # Names of ClusterTrainingRuntimes; None when they could not be listed (no permission).
    runtimes: frozenset[str] | None = None
    trainer_version: str | None = None
    # The TrainJob field for pod changes that the served schema has (see trainjob.MECHANISMS).
    trainer_mechanism: str | None = None
    server_version: str | None = None
    notes: tuple[str, ...] = field(default=())

    def serves(self, group_version: str, plural: str) -> bool:
        return (group_version, plural) in self.resources

    @property
    def pytorchjob_served(self) -> bool:
        return self.serves(pytorchjob.API_VERSION, pytorchjob.PLURAL)

    @property
    def trainjob_served(self) -> bool:
        return self.serves(trainjob.API_VERSION, trainjob.PLURAL)

    @property
    def torch_runtime(self) -> bool | None:
        """True/False: the torch-distributed ClusterTrainingRuntime exists or not; None: unknown."""
        if self.runtimes is None:
            return None
        return trainjob.TORCH_RUNTIME in self.runtimes

    @property
    def jobs_served(self) -> bool:
        return self.serves("batch/v1", "jobs")

    @property
    def mechanism(self) -> str:
        """How to render TrainJob pod changes here: detected, else the newest Trainer's way."""
        return self.trainer_mechanism or trainjob.NEWEST_MECHANISM


def choose_backend(discovery: Discovery, requested: str, elastic: bool = False) -> str:
    """The backend to deploy with. `auto`: TrainJob when Trainer v2 and its torch-distributed
    runtime are served (PyTorchJob first for elastic jobs, which TrainJob cannot run), else
    PyTorchJob when served, else a plain Indexed Job. An explicit backend the cluster does not
    serve is an MLTrainingError that names what to install."""
    if requested == "auto":
        trainer_ready = discovery.trainjob_served and discovery.torch_runtime is True
        if trainer_ready and not (elastic and discovery.pytorchjob_served):
            return TRAINJOB
        if discovery.pytorchjob_served:
            return PYTORCHJOB
        if trainer_ready:
            return TRAINJOB
        _require_jobs(discovery)
        return JOB
    if requested == PYTORCHJOB:
        if not discovery.pytorchjob_served:
            raise MLTrainingError(
                "backend = pytorchjob, but the cluster does not serve PyTorchJob (kubeflow.org/v1)",
                f"{INSTALL_TRAINING_OPERATOR}; or set backend = auto to use what the cluster has",
            )
        return PYTORCHJOB
    if requested == TRAINJOB:
        if not discovery.trainjob_served:
            raise MLTrainingError(
                "backend = trainjob, but the cluster does not serve TrainJob (trainer.kubeflow.org/v1alpha1)",
                f"{INSTALL_TRAINER}; or set backend = auto to use what the cluster has",
            )
        if discovery.torch_runtime is False:
            raise MLTrainingError(
                "backend = trainjob, but the cluster has no ClusterTrainingRuntime named torch-distributed",
                f"{INSTALL_TORCH_RUNTIME}; or set backend = auto",
            )
        return TRAINJOB
    if requested == JOB:
        _require_jobs(discovery)
        return JOB
    raise MLTrainingError(f"unknown backend {requested!r}", f"use one of auto, {', '.join(BACKENDS)}")


def _require_jobs(discovery: Discovery) -> None:
    if not discovery.jobs_served:
        raise MLTrainingError(
            "the cluster does not serve batch/v1 Jobs",
            "check that the kube context points at a Kubernetes cluster (1.27 or newer)",
        )


def describe_choice(discovery: Discovery, requested: str, chosen: str) -> str:
    """One line on why `chosen` runs the job, for the deploy command to print."""
    if requested != "auto":
        return f"backend {chosen} (set in the job's config)"
    served = [
        name
        for name, ok in (("TrainJob", discovery.trainjob_served), ("PyTorchJob", discovery.pytorchjob_served))
        if ok
    ]
    line = f"backend {chosen} (auto; the cluster serves {', '.join(served) or 'no training operator'})"
    if discovery.trainjob_served and chosen != TRAINJOB:
        if discovery.torch_runtime is None:
            line += (
                "; TrainJob not used: ClusterTrainingRuntimes could not be listed (set backend = trainjob to use it)"
            )
        elif discovery.torch_runtime is False:
            line += "; TrainJob not used: no torch-distributed ClusterTrainingRuntime"
    return line
