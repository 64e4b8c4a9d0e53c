"""Plain Kubernetes (no operator): an Indexed `batch/v1` Job plus a headless Service.

Pod `<run>-<i>` gets node rank i from its completion index; rank 0 hosts torch's static
rendezvous, reached as `<run>-0.<run>` through the headless Service. Any failed process fails
the whole Job (podFailurePolicy FailJob), so no rank waits for a dead peer. Needs Kubernetes 1.27+.
"""

from __future__ import annotations

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod
from vdk.plugin.ml_training.k8s.run import LABEL_RUN
from vdk.plugin.ml_training.k8s.run import RunInfo
from vdk.plugin.ml_training.layout import JobImage

CONTAINER = "pytorch"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def master_address(run_name: str) -> str:
    """DNS name of rank 0: the pod hostname `<job>-0` under the Service `<run>` (the subdomain)."""
    return f"{run_name}-0.{run_name}"


def render(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str) -> list[dict]:
    """The Job first (it owns the Service once created), then the Service. Elastic node ranges
    run at their maximum: a plain Job cannot grow or shrink."""
    labels = run.labels("job")
    nodes = spec.nodes.max
    launcher_env = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(spec.procs_per_node)},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}},
        },
        {"name": "PET_MASTER_ADDR", "value": master_address(run.name)},
        {"name": "PET_MASTER_PORT", "value": str(pod.RENDEZVOUS_PORT)},
    ]
    container = pod.container(spec, image, CONTAINER, launcher_env)
    container["ports"] = [{"name": "rendezvous", "containerPort": pod.RENDEZVOUS_PORT, "protocol": "TCP"}]
    pod_spec = pod.pod_spec(spec, [container], restart_policy="Never")
    pod_spec["subdomain"] = run.name
    job_spec: dict = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        # A pod lost before training starts (eviction, node failure) is replaced and rejoins the
        # waiting rendezvous; a process that exits non-zero fails the Job at once.
        "backoffLimit": spec.max_restarts,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                }
            ]
        },
        "ttlSecondsAfterFinished": spec.ttl_after_finished_seconds,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": pod.object_metadata(spec, run, image.reference, namespace, labels),
        "spec": job_spec,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": run.name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_RUN: run.name},
            # Rank 0 must be resolvable before it is Ready, or the other ranks cannot reach it.
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "rendezvous",
                    "port": pod.RENDEZVOUS_PORT,
                    "targetPort": pod.RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }
    return [job, service]


def limitations(spec: MLJobSpec) -> list[str]:
    notes = []
    if spec.nodes.elastic:
        notes.append(
            f"a plain Job has no elastic training: it runs at {spec.nodes.max} nodes (install the Kubeflow Training Operator for {spec.nodes})"
        )
    notes.append(
        "a plain Job cannot restart all nodes together: a failed process fails the run (max_restarts covers pods lost before start)"
    )
    return notes
