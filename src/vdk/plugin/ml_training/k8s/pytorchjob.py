"""Kubeflow Training Operator v1 PyTorchJob (`kubeflow.org/v1`).

The operator sets PET_MASTER_ADDR / PET_NNODES / PET_NODE_RANK / PET_NPROC_PER_NODE (and the
rendezvous variables for elastic jobs) in every pod, so torch's launcher needs no layout flags.
"""

from __future__ import annotations

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod
from vdk.plugin.ml_training.k8s.run import RunInfo
from vdk.plugin.ml_training.layout import JobImage

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CONTAINER = "pytorch"  # the operator's webhook requires this name
PORT_NAME = "pytorchjob-port"
PORT = 23456
# OnFailure restarts a failed container in place; backoffLimit bounds how often.
RESTART_POLICY = "OnFailure"


def render(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str) -> list[dict]:
    """One PyTorchJob: Master (replicas 1, set explicitly) plus nodes-1 Workers (omitted when 0:
    a Worker with replicas 0 makes the operator create and delete pods in a loop)."""
    labels = run.labels("pytorchjob")
    replica_specs = {"Master": _replica(spec, image, labels, 1)}
    workers = spec.nodes.max - 1
    if workers > 0:
        replica_specs["Worker"] = _replica(spec, image, labels, workers)
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
            "metadata": pod.object_metadata(spec, run, image.reference, namespace, labels),
            "spec": job_spec,
        }
    ]


def _replica(spec: MLJobSpec, image: JobImage, labels: dict[str, str], replicas: int) -> dict:
    container = pod.container(spec, image, CONTAINER)
    container["ports"] = [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}]
    return {
        "replicas": replicas,
        "restartPolicy": RESTART_POLICY,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod.pod_spec(spec, [container])},
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
