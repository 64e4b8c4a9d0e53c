"""Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`) on the `torch-distributed` runtime.

The runtime's torch plugin sets PET_NNODES / PET_NPROC_PER_NODE / PET_NODE_RANK / PET_MASTER_*, so
the command is torch's launcher with no layout flags. Pod changes (/dev/shm, tolerations, pod
labels, placement) go through the field the installed Trainer has: it changed in every minor release.
With the TrainJobStatus gate (Trainer 2.2+), rank 0 posts its progress into `status.trainerStatus`, which
`vdk list` and `vdk show` read from the TrainJob itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.backends.base import ApiReader
from vdk.plugin.ml_training.k8s.backends.base import Backend
from vdk.plugin.ml_training.k8s.backends.base import Discovery
from vdk.plugin.ml_training.k8s.backends.base import completion_index_rank
from vdk.plugin.ml_training.k8s.resources import CONFIG_MAP
from vdk.plugin.ml_training.k8s.resources import CRD
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.k8s.storage import data_volumes
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.runtime.kubeflow_status import parse_trainer_status
from vdk.plugin.ml_training.runtime.progress_lines import Progress

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
RUNTIME_KIND = "ClusterTrainingRuntime"
RUNTIME_PLURAL = "clustertrainingruntimes"
TORCH_RUNTIME = "torch-distributed"
INSTALL = (
    "install Kubeflow Trainer v2 (it serves TrainJob; needs JobSet): see "
    "https://www.kubeflow.org/docs/components/trainer/operator-guides/installation/"
)
INSTALL_TORCH_RUNTIME = (
    "install Trainer's default runtimes (they include the torch-distributed ClusterTrainingRuntime): "
    "kubectl apply --server-side -k "
    '"github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref=<your Trainer version>"'
)
_NOT_SERVED_FIX = (
    "install Kubeflow Trainer v2 and its torch-distributed runtime, or deploy with backend = pytorchjob / job"
)
TRAINJOB = ResourceType(KIND, GROUP, VERSION, PLURAL, not_served_fix=_NOT_SERVED_FIX)
CLUSTER_TRAINING_RUNTIME = ResourceType(
    RUNTIME_KIND, GROUP, VERSION, RUNTIME_PLURAL, namespaced=False, not_served_fix=_NOT_SERVED_FIX
)
# Trainer's public ConfigMap, which names its version.
TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_PUBLIC_CONFIGMAP = "kubeflow-trainer-public"
# Labels JobSet puts on the pods: the replicated job a pod belongs to (`node` for the ranks).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
# The runtime's replicated job and its training container.
NODE_JOB = "node"
NODE_CONTAINER = "node"
PATCH_MANAGER = "vdk.io/ml-training"

# How a TrainJob changes the runtime's pods, by Trainer release.
POD_SPEC_OVERRIDES = "podSpecOverrides"  # v2.0
POD_TEMPLATE_OVERRIDES = "podTemplateOverrides"  # v2.1
RUNTIME_PATCHES = "runtimePatches"  # v2.2 and later
MECHANISMS = (POD_SPEC_OVERRIDES, POD_TEMPLATE_OVERRIDES, RUNTIME_PATCHES)
NEWEST_MECHANISM = RUNTIME_PATCHES


def mechanism_for_version(version: str | None) -> str | None:
    """The pod-change field of a Trainer release ("v2.1.0" -> podTemplateOverrides); None if unknown."""
    match = re.match(r"^v?(\d+)\.(\d+)", (version or "").strip())
    if not match:
        return None
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 2:
        return NEWEST_MECHANISM if major > 2 else None
    return {0: POD_SPEC_OVERRIDES, 1: POD_TEMPLATE_OVERRIDES}.get(minor, RUNTIME_PATCHES)


def mechanism_from_fields(spec_fields) -> str | None:
    """The pod-change field among the fields a served TrainJob spec schema declares."""
    for mechanism in reversed(MECHANISMS):
        if mechanism in spec_fields:
            return mechanism
    return None


def render(
    spec: MLJobSpec,
    image: JobImage,
    run: RunInfo,
    namespace: str,
    mechanism: str = NEWEST_MECHANISM,
    runtime: str = TORCH_RUNTIME,
) -> list[dict]:
    """One TrainJob. Elastic node ranges run at their maximum: Trainer v2 has no elastic training."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown TrainJob pod-change mechanism {mechanism!r}")
    labels = run.labels("trainjob")
    trainjob_spec: dict = {
        "runtimeRef": {"name": runtime, "apiGroup": GROUP, "kind": RUNTIME_KIND},
        "trainer": {
            "image": image.reference,
            # the data step first, in this container: a TrainJob's runtime pods take no init container of ours
            "command": data_volumes.fetch_then(spec, run, image.python, pod_template.command(spec, image.python)),
            "numNodes": spec.nodes.max,
            "numProcPerNode": spec.procs_per_node,
            "resourcesPerNode": pod_template.resources(spec),
            "env": pod_template.env(spec, run),
        },
    }
    # activeDeadlineSeconds arrived with runtimePatches (v2.2); older servers prune it silently.
    if spec.max_runtime_seconds and mechanism == RUNTIME_PATCHES:
        trainjob_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if mechanism != RUNTIME_PATCHES:
        trainjob_spec["labels"] = labels  # v2.0/v2.1: passed on to the JobSet and its Jobs
    trainjob_spec[mechanism] = _pod_changes(spec, run, labels, mechanism)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": pod_template.object_metadata(spec, run, image.reference, namespace, labels),
            "spec": trainjob_spec,
        }
    ]


def _pod_changes(spec: MLJobSpec, run: RunInfo, labels: dict[str, str], mechanism: str) -> list[dict]:
    volumes = pod_template.volumes(spec)
    mounts = pod_template.volume_mounts(spec, run, linked=True) + data_volumes.step_mounts(spec, with_claims=False)
    containers = [{"name": NODE_CONTAINER, "volumeMounts": mounts}]
    placement = pod_template.placement_fields(spec)  # node selection, tolerations, pull secrets, service account
    if mechanism == POD_SPEC_OVERRIDES:
        return [{"targetJobs": [{"name": NODE_JOB}], "volumes": volumes, "containers": containers, **placement}]
    pod_spec: dict = {"volumes": volumes, "containers": containers, **placement}
    if mechanism == RUNTIME_PATCHES:  # the older fields take no terminationGracePeriodSeconds
        pod_spec.update(pod_template.grace_fields(spec))
    metadata = {"labels": dict(labels)}
    if mechanism == POD_TEMPLATE_OVERRIDES:
        return [{"targetJobs": [{"name": NODE_JOB}], "metadata": metadata, "spec": pod_spec}]
    job_patch = {"name": NODE_JOB, "template": {"spec": {"template": {"metadata": metadata, "spec": pod_spec}}}}
    return [
        {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job_patch]}}},
        }
    ]


def limitations(spec: MLJobSpec, mechanism: str) -> list[str]:
    """What of the spec a TrainJob cannot honour, for the deploy command to say."""
    notes = []
    if spec.nodes.elastic:
        notes.append(
            f"TrainJob has no elastic training: it runs at {spec.nodes.max} nodes "
            f"(use backend = pytorchjob for {spec.nodes})"
        )
    notes.append("TrainJob has no TTL: the finished TrainJob stays until `vdk delete` removes it")
    notes.append(
        "TrainJob restarts follow the runtime's failure policy, not max_restarts: a preemption or an eviction counts "
        "against its maxRestarts unless the runtime's rules say otherwise (docs: Preemption, restarts and resuming)"
    )
    if spec.priority_class:
        notes.append("TrainJob cannot set a pod PriorityClass: priority_class is not applied")
    if spec.max_runtime_seconds and mechanism != RUNTIME_PATCHES:
        notes.append("this Trainer version has no activeDeadlineSeconds: max_runtime is not enforced")
    if spec.termination_grace_period_seconds and mechanism != RUNTIME_PATCHES:
        notes.append(
            "this Trainer version cannot set the pods' terminationGracePeriodSeconds: a pod told to stop has the "
            "runtime's (30 s unless it sets one) to save its checkpoint"
        )
    if data_volumes.fetches(spec):
        notes.append(
            "TrainJob: the datasets are fetched, pinned, by the training container before torch's launcher "
            "(Trainer's dataset and model initializers take no revision or object version, and a TrainJob adds "
            "no init container to its runtime's pods)"
        )
    return notes


# --- the cluster's Trainer ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainerFacts:
    """What discovery found out about the installed Trainer."""

    # Names of ClusterTrainingRuntimes; None when they could not be listed (no permission).
    runtimes: frozenset[str] | None = None
    version: str | None = None
    # The TrainJob field for pod changes that the served schema has (see MECHANISMS); None: unknown.
    mechanism: str | None = None

    @property
    def torch_runtime(self) -> bool | None:
        """True/False: the torch-distributed ClusterTrainingRuntime exists or not; None: unknown."""
        if self.runtimes is None:
            return None
        return TORCH_RUNTIME in self.runtimes

    @property
    def rendering_mechanism(self) -> str:
        """How to render TrainJob pod changes here: detected, else the newest Trainer's way."""
        return self.mechanism or NEWEST_MECHANISM


def trainer_facts(cluster: Discovery | None) -> TrainerFacts:
    """The Trainer facts of a discovery; all unknown without one (a dry run asks no cluster)."""
    found = cluster.facts.get(TrainJobBackend.name) if cluster is not None else None
    return found if isinstance(found, TrainerFacts) else TrainerFacts()


def discover_trainer(api: ApiReader, notes: list[str]) -> TrainerFacts:
    """The runtimes, version and pod-change field of the Trainer a cluster serves."""
    runtimes = _cluster_training_runtimes(api, notes)
    version = _trainer_version(api, notes)
    mechanism = _served_trainjob_mechanism(api, notes) or mechanism_for_version(version) or _crd_trainjob_mechanism(api)
    if mechanism is None:
        notes.append(f"the Trainer version could not be detected; TrainJob pod changes use {NEWEST_MECHANISM}")
    return TrainerFacts(runtimes=runtimes, version=version, mechanism=mechanism)


def _cluster_training_runtimes(api: ApiReader, notes: list[str]) -> frozenset[str] | None:
    listing, refused = api.get_tolerant(CLUSTER_TRAINING_RUNTIME.path(), CLUSTER_TRAINING_RUNTIME.action("list"))
    if refused is not None:
        notes.append(f"ClusterTrainingRuntimes could not be listed ({refused.status} {refused.reason})")
        return None
    return frozenset(item["metadata"]["name"] for item in (listing or {}).get("items", []))


def _trainer_version(api: ApiReader, notes: list[str]) -> str | None:
    configmap, refused = api.get_tolerant(
        CONFIG_MAP.path(TRAINER_NAMESPACE, TRAINER_PUBLIC_CONFIGMAP),
        CONFIG_MAP.action("get", TRAINER_NAMESPACE, TRAINER_PUBLIC_CONFIGMAP),
    )
    if refused is not None:
        return None
    for key, value in sorted(((configmap or {}).get("data") or {}).items()):
        if "version" in key and re.match(r"^v?\d+\.\d+", str(value).strip()):
            return str(value).strip()
    notes.append(f"{TRAINER_NAMESPACE}/{TRAINER_PUBLIC_CONFIGMAP} has no version entry")
    return None


def _served_trainjob_mechanism(api: ApiReader, notes: list[str]) -> str | None:
    """Read the TrainJob schema the API server publishes (OpenAPI v3; readable by any user)."""
    document, refused = api.get_tolerant(
        f"/openapi/v3/apis/{GROUP}/{VERSION}", Action("get", "openapi/v3"), tolerate=(403, 404, 406)
    )
    if refused is not None:
        return None
    schemas = ((document or {}).get("components") or {}).get("schemas") or {}
    for schema in schemas.values():
        gvks = schema.get("x-kubernetes-group-version-kind") or []
        if any(g.get("group") == GROUP and g.get("kind") == KIND for g in gvks):
            spec = _resolve(schemas, (schema.get("properties") or {}).get("spec") or {})
            return mechanism_from_fields(spec.get("properties") or {})
    notes.append("the published OpenAPI v3 has no TrainJob schema")
    return None


def _crd_trainjob_mechanism(api: ApiReader) -> str | None:
    name = f"{PLURAL}.{GROUP}"
    crd, refused = api.get_tolerant(CRD.path(name=name), CRD.action("get", name=name))
    if refused is not None:
        return None
    for version in (crd or {}).get("spec", {}).get("versions", []):
        if version.get("name") == VERSION:
            spec = version.get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
            return mechanism_from_fields(spec.get("properties") or {})
    return None


def _resolve(schemas: dict, node: dict) -> dict:
    """Follow `$ref` (directly or as the only allOf entry) into the OpenAPI components."""
    for _ in range(5):
        ref = node.get("$ref") or next((a.get("$ref") for a in node.get("allOf") or [] if a.get("$ref")), None)
        if not ref:
            return node
        node = schemas.get(ref.rsplit("/", 1)[-1], {})
    return node


# --- the backend -------------------------------------------------------------------------------------


def rank_of(pod_object: dict) -> tuple[int | None, str]:
    """Node rank from the completion index of the `node` job's pods; helper jobs (an initializer) are no rank."""
    labels = (pod_object.get("metadata") or {}).get("labels") or {}
    job = labels.get(REPLICATED_JOB_LABEL, NODE_JOB)
    if job != NODE_JOB:
        return None, job
    return completion_index_rank(pod_object)


def shape(obj: dict) -> tuple[str, dict]:
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    return str(trainer.get("numNodes") or 1), trainer.get("resourcesPerNode") or {}


class TrainJobBackend(Backend):
    name = "trainjob"
    main = TRAINJOB
    creates = (TRAINJOB,)
    container = NODE_CONTAINER
    auto_preference = 10  # first: Trainer v2 is where Kubeflow training goes
    install = INSTALL
    records_start_time = False  # its status has conditions and its jobs' counts, no start time
    disruptions_free = False  # its runtime's JobSet failurePolicy decides (runtimePatches cannot carry one)

    def render(
        self, spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, cluster: Discovery | None
    ) -> list[dict]:
        return render(spec, image, run, namespace, mechanism=trainer_facts(cluster).rendering_mechanism)

    def limitations(self, spec: MLJobSpec, cluster: Discovery | None) -> list[str]:
        return limitations(spec, trainer_facts(cluster).rendering_mechanism)

    def pod_selector(self, run_name: str) -> str:
        return f"{JOBSET_NAME_LABEL}={run_name}"

    def rank_of(self, pod: dict) -> tuple[int | None, str]:
        return rank_of(pod)

    def running(self, obj: dict) -> bool:
        status = obj.get("status") or {}
        return any((j.get("active") or 0) > 0 for j in status.get("jobsStatus") or [])

    def starting(self, obj: dict) -> bool | None:
        # per replicated job, JobSet counts child Jobs: `ready` ones have all their pods ready (or done)
        nodes = [j for j in (obj.get("status") or {}).get("jobsStatus") or [] if j.get("name") == NODE_JOB]
        if not nodes:
            return None
        return any(int(j.get("ready") or 0) < int(j.get("active") or 0) for j in nodes)

    def shape(self, obj: dict) -> tuple[str, dict]:
        return shape(obj)

    def progress(self, obj: dict) -> Progress | None:
        # status.trainerStatus: Trainer 2.2+ with the TrainJobStatus gate, posted by rank 0 (runtime/kubeflow_status.py)
        return parse_trainer_status((obj.get("status") or {}).get("trainerStatus"))

    def discover(self, api: ApiReader, notes: list[str]) -> TrainerFacts:
        return discover_trainer(api, notes)

    def unavailable(self, cluster: Discovery) -> MLTrainingError | None:
        problem = super().unavailable(cluster)
        if problem is None and trainer_facts(cluster).torch_runtime is False:
            return MLTrainingError(
                f"backend = {self.name}, but the cluster has no ClusterTrainingRuntime named {TORCH_RUNTIME}",
                f"{INSTALL_TORCH_RUNTIME}; or set backend = auto",
            )
        return problem

    def ready(self, cluster: Discovery) -> bool:
        # `auto` takes TrainJob only where the runtime is known to exist: unlisted runtimes prove nothing.
        return cluster.serves(self.main) and trainer_facts(cluster).torch_runtime is True

    def passed_over(self, cluster: Discovery) -> str | None:
        torch_runtime = trainer_facts(cluster).torch_runtime
        if torch_runtime is None:
            return "ClusterTrainingRuntimes could not be listed (set backend = trainjob to use it)"
        if torch_runtime is False:
            return f"no {TORCH_RUNTIME} ClusterTrainingRuntime"
        return None


BACKEND = TrainJobBackend()
