"""A whole run rendered for one backend: the backend's objects, then the run record."""

from __future__ import annotations

import yaml

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.k8s.storage import data_volumes
from vdk.plugin.ml_training.layout import JobImage


def render_run(
    spec: MLJobSpec,
    image: JobImage,
    run: RunInfo,
    namespace: str,
    backend: str,
    cluster: Discovery | None = None,
    with_record: bool = True,
) -> list[dict]:
    """Manifests in the order to create them. The first one is the run's main object: the
    client makes every later one owned by it, so deleting it (or its TTL) removes them all.
    `cluster`: what discovery found (None for a dry run, which asks no cluster)."""
    if spec.sweep is not None:
        from vdk.plugin.ml_training.k8s import sweep_manifests

        objects = sweep_manifests.render(spec, image, run, namespace)
        backend = sweep_manifests.BACKEND
    else:
        objects = backends.get(backend).render(spec, image, run, namespace, cluster)
    if with_record:
        objects.append(run_record.render(spec, image.reference, run, namespace, backend, objects))
    return objects


def limitations(spec: MLJobSpec, backend: str, cluster: Discovery | None = None) -> list[str]:
    """What of the spec `backend` cannot honour: notes for the deploy command to print."""
    if spec.sweep is not None:
        from vdk.plugin.ml_training.k8s import sweep_manifests

        return sweep_manifests.limitations(spec) + data_volumes.notes(spec)
    return backends.get(backend).limitations(spec, cluster) + data_volumes.notes(spec)


def pod_selector(backend: str, run_name: str) -> str:
    """Label selector of a run's training pods (for logs and events)."""
    return backends.get(backend).pod_selector(run_name)


def to_yaml(manifests: list[dict]) -> str:
    """Multi-document YAML, as `kubectl apply -f -` reads it."""
    return yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, width=1000)
