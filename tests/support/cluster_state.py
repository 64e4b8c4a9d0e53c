"""What the operators, the scheduler, the kubelet and Kueue write about a run, for the fake API
server: pods with each backend's operator labels and real status shapes, events, Workloads."""

from __future__ import annotations

import secrets
from datetime import datetime
from datetime import timedelta
from datetime import timezone

CONTAINER = {"pytorchjob": "pytorch", "trainjob": "node", "job": "pytorch"}
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def ts(seconds: float = 0) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_labels(run_obj: dict) -> dict:
    """The labels the renderers put on pod templates (the run's own labels, without Kueue's)."""
    labels = run_obj["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("vdk.io/") or k == "app.kubernetes.io/managed-by"}


def rank_pod(
    run_obj: dict,
    backend: str,
    rank: int,
    status: dict,
    memory: str = "16Gi",
    created: str | None = None,
    suffix: str | None = None,
) -> dict:
    """The pod of node rank `rank` as the backend's controller names and labels it."""
    run = run_obj["metadata"]["name"]
    labels = run_labels(run_obj)
    annotations = {}
    if backend == "pytorchjob":
        role = "master" if rank == 0 else "worker"
        index = 0 if rank == 0 else rank - 1
        name = f"{run}-{role}-{index}"
        labels.update(
            {
                "training.kubeflow.org/job-name": run,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(index),
            }
        )
        if rank == 0:
            labels["training.kubeflow.org/job-role"] = "master"
    elif backend == "trainjob":
        name = f"{run}-node-0-{rank}-{suffix or secrets.token_hex(3)[:5]}"
        labels.update(
            {
                "jobset.sigs.k8s.io/jobset-name": run,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-name": f"{run}-node-0",
                "batch.kubernetes.io/job-completion-index": str(rank),
            }
        )
        annotations["batch.kubernetes.io/job-completion-index"] = str(rank)
    else:
        name = f"{run}-{rank}-{suffix or secrets.token_hex(3)[:5]}"
        labels.update(
            {
                "batch.kubernetes.io/job-name": run,
                "job-name": run,
                "batch.kubernetes.io/job-completion-index": str(rank),
            }
        )
        annotations["batch.kubernetes.io/job-completion-index"] = str(rank)
    container = CONTAINER[backend]
    spec = {"containers": [{"name": container, "image": "img", "resources": {"limits": {"memory": memory}}}]}
    if status.get("_node"):
        spec["nodeName"] = status["_node"]
    pod_status = {k: v for k, v in status.items() if not k.startswith("_")}
    for cs in pod_status.get("containerStatuses", []):
        cs.setdefault("name", container)
    metadata = {"name": name, "labels": labels, "annotations": annotations}
    if created:
        metadata["creationTimestamp"] = created
    return {"metadata": metadata, "spec": spec, "status": pod_status}


# --- pod statuses (status dicts; `_node` is where the scheduler placed the pod) -------------------------


def running(node: str = "gpu-node-1", restarts: int = 0, last: dict | None = None) -> dict:
    cs = {"ready": True, "restartCount": restarts, "state": {"running": {"startedAt": ts(60)}}}
    if last:
        cs["lastState"] = {"terminated": last}
    return {
        "_node": node,
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [cs],
    }


def unschedulable(message: str) -> dict:
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    }


def waiting(
    reason: str, message: str | None = None, node: str = "gpu-node-2", restarts: int = 0, last: dict | None = None
) -> dict:
    state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    cs = {"ready": False, "restartCount": restarts, "state": state}
    if last:
        cs["lastState"] = {"terminated": last}
    phase = "Running" if reason == "CrashLoopBackOff" else "Pending"
    return {
        "_node": node,
        "phase": phase,
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [cs],
    }


def terminated(
    exit_code: int,
    reason: str = "Error",
    finished: float = 300,
    node: str = "gpu-node-1",
    restarts: int = 0,
    last: dict | None = None,
    message: str | None = None,
) -> dict:
    ended = termination(exit_code, reason, finished, message)
    cs = {"ready": False, "restartCount": restarts, "state": {"terminated": ended}}
    if last:
        cs["lastState"] = {"terminated": last}
    return {"_node": node, "phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [cs]}


def termination(exit_code: int, reason: str = "Error", finished: float = 300, message: str | None = None) -> dict:
    """How a container ended; `message`: what it left in /dev/termination-log (the kubelet's copy)."""
    ended = {"exitCode": exit_code, "reason": reason, "startedAt": ts(60), "finishedAt": ts(finished)}
    if message is not None:
        ended["message"] = message
    return ended


# --- events and Kueue -----------------------------------------------------------------------------------


def event(
    kind: str,
    name: str,
    reason: str,
    message: str,
    type_: str = "Warning",
    count: int = 1,
    last: str | None = None,
    component: str = "default-scheduler",
) -> dict:
    return {
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ml"},
        "reason": reason,
        "message": message,
        "type": type_,
        "count": count,
        "firstTimestamp": last or ago(60),
        "lastTimestamp": last or ago(30),
        "source": {"component": component},
    }


def workload(run_obj: dict, conditions: list[dict]) -> dict:
    """Kueue's Workload for a run's object, named `<kind>-<run>-<hash>`."""
    run = run_obj["metadata"]
    return {
        "metadata": {
            "name": f"{run_obj['kind'].lower()}-{run['name']}-{secrets.token_hex(3)[:5]}",
            "labels": {"kueue.x-k8s.io/job-uid": run["uid"]},
        },
        "spec": {"queueName": (run.get("labels") or {}).get("kueue.x-k8s.io/queue-name")},
        "status": {"conditions": conditions},
    }
