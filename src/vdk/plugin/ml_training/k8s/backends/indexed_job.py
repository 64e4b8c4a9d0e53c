"""Plain Kubernetes (no operator): an Indexed `batch/v1` Job plus a headless Service.

Pod `<run>-<i>` gets node rank i from its completion index; rank 0 hosts torch's static
rendezvous, reached as `<run>-0.<run>` through the headless Service. Any failed process fails
the whole Job (podFailurePolicy FailJob), so no rank waits for a dead peer; a pod stopped by a disruption
(DisruptionTarget: preemption, eviction, a lost node) is replaced without counting against `backoffLimit`
(podFailurePolicy Ignore). Needs Kubernetes 1.27+.
"""

from __future__ import annotations

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.backends.base import COMPLETION_INDEX
from vdk.plugin.ml_training.k8s.backends.base import DISRUPTION_TARGET
from vdk.plugin.ml_training.k8s.backends.base import Backend
from vdk.plugin.ml_training.k8s.backends.base import Discovery
from vdk.plugin.ml_training.k8s.backends.base import as_int
from vdk.plugin.ml_training.k8s.backends.base import first_container
from vdk.plugin.ml_training.k8s.resources import JOB
from vdk.plugin.ml_training.k8s.resources import SERVICE
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_RUN
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.layout import JobImage

CONTAINER = "pytorch"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def master_address(run_name: str) -> str:
    """DNS name of rank 0: the pod hostname `<job>-0` under the Service `<run>` (the subdomain)."""
    return f"{run_name}-0.{run_name}"


def render(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str) -> list[dict]:
    """The Job first (it owns the Service once created), then the Service. Elastic node ranges
    run at their maximum: a plain Job cannot grow or shrink."""
    labels = run.labels("job")
    nodes = spec.nodes.max
    launcher_env: list[dict] = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(spec.procs_per_node)},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
        },
        {"name": "PET_MASTER_ADDR", "value": master_address(run.name)},
        {"name": "PET_MASTER_PORT", "value": str(pod_template.RENDEZVOUS_PORT)},
    ]
    container = pod_template.container(spec, image, CONTAINER, run, launcher_env)
    container["ports"] = [{"name": "rendezvous", "containerPort": pod_template.RENDEZVOUS_PORT, "protocol": "TCP"}]
    pod_spec = pod_template.pod_spec(
        spec, [container], restart_policy="Never", init=pod_template.init_containers(spec, image, run)
    )
    pod_spec["subdomain"] = run.name
    job_spec: dict = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        # A pod that failed before its container ran (it never started) is replaced within backoffLimit; a
        # process that exits non-zero fails the Job at once.
        "backoffLimit": spec.max_restarts,
        "podFailurePolicy": failure_policy(),
        "ttlSecondsAfterFinished": spec.ttl_after_finished_seconds,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    job = {
        "apiVersion": JOB.api_version,
        "kind": JOB.kind,
        "metadata": pod_template.object_metadata(spec, run, image.reference, namespace, labels),
        "spec": job_spec,
    }
    service = {
        "apiVersion": SERVICE.api_version,
        "kind": SERVICE.kind,
        "metadata": {"name": run.name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_RUN: run.name},
            # Rank 0 must be resolvable before it is Ready, or the other ranks cannot reach it.
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "rendezvous",
                    "port": pod_template.RENDEZVOUS_PORT,
                    "targetPort": pod_template.RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }
    return [job, service]


def failure_policy() -> dict:
    """The rules, first match wins: a disruption first (its container, told to stop, ends with 143 after saving a
    checkpoint: the exit code rule would fail the Job), then any exit code but 0."""
    return {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]}},
        ]
    }


def limitations(spec: MLJobSpec) -> list[str]:
    notes = []
    if spec.nodes.elastic:
        notes.append(
            f"a plain Job has no elastic training: it runs at {spec.nodes.max} nodes "
            f"(install the Kubeflow Training Operator for {spec.nodes})"
        )
    notes.append(
        "a plain Job cannot restart all nodes together: a failed process fails the run "
        "(max_restarts covers pods lost before start)"
        + (
            "; a preempted or evicted pod is replaced uncounted, but its peers on the other nodes fail with it"
            if spec.nodes.max > 1
            else ""
        )
    )
    return notes


def shape(obj: dict) -> tuple[str, dict]:
    spec = obj.get("spec") or {}
    nodes = str(spec.get("parallelism") or spec.get("completions") or 1)
    return nodes, first_container(spec.get("template") or {}).get("resources") or {}


class IndexedJobBackend(Backend):
    name = "job"
    main = JOB
    creates = (JOB, SERVICE)
    container = CONTAINER
    auto_preference = 30  # last: plain Kubernetes runs anywhere, without an operator
    operator = False

    def render(
        self, spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, cluster: Discovery | None
    ) -> list[dict]:
        return render(spec, image, run, namespace)

    def limitations(self, spec: MLJobSpec, cluster: Discovery | None) -> list[str]:
        return limitations(spec)

    def no_pods_yet(self, run_name: str, namespace: str | None) -> tuple[str, str]:
        # No operator: Kubernetes' own Job controller creates the pods, and says in the Job's events why not.
        where = f" -n {namespace}" if namespace else ""
        return (
            "Kubernetes' Job controller has not created them yet",
            f"if this lasts, `kubectl describe job {run_name}{where}` says why (a ResourceQuota, a LimitRange or an "
            "admission policy can refuse the pods)",
        )

    def pod_selector(self, run_name: str) -> str:
        return f"{JOB_NAME_LABEL}={run_name}"

    def running(self, obj: dict) -> bool:
        return ((obj.get("status") or {}).get("active") or 0) > 0

    def starting(self, obj: dict) -> bool | None:
        # `active` counts pending and running pods, `ready` those whose containers run (Kubernetes 1.24+)
        status = obj.get("status") or {}
        if status.get("ready") is None:
            return None
        return int(status["ready"]) < int(status.get("active") or 0)

    def shape(self, obj: dict) -> tuple[str, dict]:
        return shape(obj)

    def kept_after_finished(self, obj: dict) -> int | None:
        return as_int((obj.get("spec") or {}).get("ttlSecondsAfterFinished"))

    def unavailable(self, cluster: Discovery) -> MLTrainingError | None:
        if cluster.serves(self.main):
            return None
        return MLTrainingError(
            "the cluster does not serve batch/v1 Jobs",
            "check that the kube context points at a Kubernetes cluster (1.27 or newer)",
        )


BACKEND = IndexedJobBackend()
