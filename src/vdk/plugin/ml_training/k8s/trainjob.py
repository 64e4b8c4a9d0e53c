"""Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`) on the `torch-distributed` runtime.

The runtime's torch plugin sets PET_NNODES / PET_NPROC_PER_NODE / PET_NODE_RANK / PET_MASTER_*, so
the command is torch's launcher with no layout flags. Pod changes (/dev/shm, tolerations, pod
labels) go through the field the installed Trainer has: it changed in every minor release.
"""

from __future__ import annotations

import re

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import pod
from vdk.plugin.ml_training.k8s.run import RunInfo
from vdk.plugin.ml_training.layout import JobImage

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
RUNTIME_KIND = "ClusterTrainingRuntime"
RUNTIME_PLURAL = "clustertrainingruntimes"
TORCH_RUNTIME = "torch-distributed"
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
            "command": pod.command(spec, image.python),
            "numNodes": spec.nodes.max,
            "numProcPerNode": spec.procs_per_node,
            "resourcesPerNode": pod.resources(spec),
            "env": pod.env(spec),
        },
    }
    # activeDeadlineSeconds arrived with runtimePatches (v2.2); older servers prune it silently.
    if spec.max_runtime_seconds and mechanism == RUNTIME_PATCHES:
        trainjob_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if mechanism != RUNTIME_PATCHES:
        trainjob_spec["labels"] = labels  # v2.0/v2.1: passed on to the JobSet and its Jobs
    trainjob_spec[mechanism] = _pod_changes(spec, labels, mechanism)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": pod.object_metadata(spec, run, image.reference, namespace, labels),
            "spec": trainjob_spec,
        }
    ]


def _pod_changes(spec: MLJobSpec, labels: dict[str, str], mechanism: str) -> list[dict]:
    volumes = [pod.shm_volume(spec)]
    containers = [{"name": NODE_CONTAINER, "volumeMounts": [pod.shm_mount()]}]
    tolerations = pod.tolerations(spec)
    if mechanism == POD_SPEC_OVERRIDES:
        override: dict = {"targetJobs": [{"name": NODE_JOB}], "volumes": volumes, "containers": containers}
        if tolerations:
            override["tolerations"] = tolerations
        return [override]
    pod_spec: dict = {"volumes": volumes, "containers": containers}
    if tolerations:
        pod_spec["tolerations"] = tolerations
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
            f"TrainJob has no elastic training: it runs at {spec.nodes.max} nodes (use backend = pytorchjob for {spec.nodes})"
        )
    notes.append("TrainJob has no TTL: the finished TrainJob stays until `vdk delete` removes it")
    notes.append("TrainJob restarts follow the runtime's failure policy, not max_restarts")
    if spec.priority_class:
        notes.append("TrainJob cannot set a pod PriorityClass: priority_class is not applied")
    if spec.max_runtime_seconds and mechanism != RUNTIME_PATCHES:
        notes.append("this Trainer version has no activeDeadlineSeconds: max_runtime is not enforced")
    return notes
