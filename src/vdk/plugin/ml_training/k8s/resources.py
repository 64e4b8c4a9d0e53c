"""Kubernetes resource types by REST path: the built-in ones the plugin reads and writes (backends
declare their own in their modules)."""

from __future__ import annotations

from dataclasses import dataclass

from vdk.plugin.ml_training.k8s.api_errors import Action


@dataclass(frozen=True)
class ResourceType:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True
    # What to do when the cluster does not serve this type (its CRD is missing), for error messages.
    not_served_fix: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base

    def action(self, verb: str, namespace: str | None = None, name: str | None = None) -> Action:
        return Action(
            verb,
            self.plural,
            self.group,
            self.kind,
            namespace if self.namespaced else None,
            name,
            self.version,
            self.not_served_fix,
        )


JOB = ResourceType("Job", "batch", "v1", "jobs")
SERVICE = ResourceType("Service", "", "v1", "services")
CONFIG_MAP = ResourceType("ConfigMap", "", "v1", "configmaps")
NAMESPACE = ResourceType("Namespace", "", "v1", "namespaces", namespaced=False)
POD = ResourceType("Pod", "", "v1", "pods")
EVENT = ResourceType("Event", "", "v1", "events")
CRD = ResourceType(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False
)
# Kueue's admission record of a queued run (v1beta2 since Kueue 0.15); read when it is served and allowed.
KUEUE_WORKLOADS = (
    ResourceType("Workload", "kueue.x-k8s.io", "v1beta1", "workloads"),
    ResourceType("Workload", "kueue.x-k8s.io", "v1beta2", "workloads"),
)
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PERSISTENT_VOLUME_CLAIM = ResourceType("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims")
# The short-lived lock of concurrent deploys of one job (k8s/lease.py); served by every cluster since 1.14.
LEASE = ResourceType("Lease", "coordination.k8s.io", "v1", "leases")
