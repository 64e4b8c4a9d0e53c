"""Kubeflow Training Operator v1 PyTorchJob (`kubeflow.org/v1`).

The operator sets PET_MASTER_ADDR / PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE (and the
rendezvous variables for elastic jobs) in every pod, so torch's launcher needs no layout flags.
"""

from __future__ import annotations

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.backends.base import Backend
from vdk.plugin.ml_training.k8s.backends.base import Discovery
from vdk.plugin.ml_training.k8s.backends.base import as_int
from vdk.plugin.ml_training.k8s.backends.base import first_container
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.layout import JobImage

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CONTAINER = "pytorch"  # the operator's webhook requires this name
INSTALL = (
    "install the Kubeflow Training Operator v1 (it serves PyTorchJob): "
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"'
)
PYTORCHJOB = ResourceType(
    KIND,
    GROUP,
    VERSION,
    PLURAL,
    not_served_fix="install the Kubeflow Training Operator v1 (it serves PyTorchJob), or deploy with backend = job",
)
# Labels the operator puts on the pods: Master is rank 0, Worker i is rank i + 1.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
PORT_NAME = "pytorchjob-port"
PORT = 23456
# OnFailure restarts a failed container in place; backoffLimit bounds how often (the operator counts the restarts
# of containers in place: a bug, an OOM kill). A pod that a disruption deleted (preemption, an eviction, a lost node)
# is created again and not counted. ExitCode would make every exit code of 1-127 final and count nothing.
RESTART_POLICY = "OnFailure"


def render(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str) -> list[dict]:
    """One PyTorchJob: Master (replicas 1, set explicitly) plus nodes-1 Workers (omitted when 0:
    a Worker with replicas 0 makes the operator create and delete pods in a loop)."""
    labels = run.labels("pytorchjob")
    replica_specs = {"Master": _replica(spec, image, run, labels, 1)}
    workers = spec.nodes.max - 1
    if workers > 0:
        replica_specs["Worker"] = _replica(spec, image, run, labels, workers)
    job_spec: dict = {
        "pytorchReplicaSpecs": replica_specs,
        "nprocPerNode": str(spec.procs_per_node),
        "runPolicy": _run_policy(spec),
    }
    if spec.nodes.elastic:
        job_spec["elasticPolicy"] = {
            "minReplicas": spec.nodes.min,
            "maxReplicas": spec.nodes.max,
            "rdzvBackend": "c10d",
            "maxRestarts": spec.max_restarts,
        }
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": pod_template.object_metadata(spec, run, image.reference, namespace, labels),
            "spec": job_spec,
        }
    ]


def _replica(spec: MLJobSpec, image: JobImage, run: RunInfo, labels: dict[str, str], replicas: int) -> dict:
    container = pod_template.container(spec, image, CONTAINER, run)
    container["ports"] = [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}]
    return {
        "replicas": replicas,
        "restartPolicy": RESTART_POLICY,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": pod_template.pod_spec(spec, [container], init=pod_template.init_containers(spec, image, run)),
        },
    }


def _run_policy(spec: MLJobSpec) -> dict:
    policy: dict = {
        # The default (None) keeps finished pods, and with them their GPUs.
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": spec.ttl_after_finished_seconds,
        "backoffLimit": spec.max_restarts,
    }
    if spec.max_runtime_seconds:
        policy["activeDeadlineSeconds"] = spec.max_runtime_seconds
    scheduling = {}
    if spec.queue:
        scheduling["queue"] = spec.queue
    if spec.priority_class:
        scheduling["priorityClass"] = spec.priority_class
    if scheduling:
        policy["schedulingPolicy"] = scheduling
    return policy


def limitations(spec: MLJobSpec) -> list[str]:
    return []


def rank_of(pod_object: dict) -> tuple[int | None, str]:
    metadata = pod_object.get("metadata") or {}
    labels = metadata.get("labels") or {}
    index = as_int(labels.get(REPLICA_INDEX_LABEL))
    replica_type = (labels.get(REPLICA_TYPE_LABEL) or "").lower()
    if replica_type == "master":
        return 0, "0"
    if replica_type == "worker" and index is not None:
        return index + 1, str(index + 1)
    return None, replica_type or metadata.get("name", "?")


def shape(obj: dict) -> tuple[str, dict]:
    spec = obj.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    total = sum(int(r.get("replicas") or 0) for r in replicas.values())
    elastic = spec.get("elasticPolicy") or {}
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    nodes = f"{low}:{high}" if elastic and low is not None and high is not None and low != high else str(total)
    first = replicas.get("Master") or replicas.get("Worker") or {}
    return nodes, first_container(first.get("template") or {}).get("resources") or {}


def starting(obj: dict) -> bool | None:
    """The operator counts a replica's pods by phase: `active` are the Running ones, so fewer active (and
    finished) pods than replicas means some are still pending."""
    statuses = (obj.get("status") or {}).get("replicaStatuses")
    if not statuses:
        return None
    specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    for name, replica in specs.items():
        counts = statuses.get(name) or {}
        done = sum(int(counts.get(key) or 0) for key in ("active", "succeeded", "failed"))
        if done < int(replica.get("replicas") or 0):
            return True
    return False


class PyTorchJobBackend(Backend):
    name = "pytorchjob"
    main = PYTORCHJOB
    creates = (PYTORCHJOB,)
    container = CONTAINER
    auto_preference = 20
    elastic = True
    install = INSTALL

    def render(
        self, spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, cluster: Discovery | None
    ) -> list[dict]:
        return render(spec, image, run, namespace)

    def limitations(self, spec: MLJobSpec, cluster: Discovery | None) -> list[str]:
        return limitations(spec)

    def pod_selector(self, run_name: str) -> str:
        return f"{JOB_NAME_LABEL}={run_name}"

    def rank_of(self, pod: dict) -> tuple[int | None, str]:
        return rank_of(pod)

    def suspended(self, obj: dict) -> bool:
        return super().suspended(obj) or ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True

    def starting(self, obj: dict) -> bool | None:
        return starting(obj)

    def kept_after_finished(self, obj: dict) -> int | None:
        return as_int(((obj.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished"))

    def shape(self, obj: dict) -> tuple[str, dict]:
        return shape(obj)


BACKEND = PyTorchJobBackend()
