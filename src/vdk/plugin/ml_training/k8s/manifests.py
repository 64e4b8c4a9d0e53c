"""A whole run rendered for one backend: the backend's objects, then the run record."""

from __future__ import annotations

import yaml

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import indexed_job
from vdk.plugin.ml_training.k8s import pytorchjob
from vdk.plugin.ml_training.k8s import record
from vdk.plugin.ml_training.k8s import trainjob
from vdk.plugin.ml_training.k8s.backends import BACKENDS
from vdk.plugin.ml_training.k8s.backends import JOB
from vdk.plugin.ml_training.k8s.backends import PYTORCHJOB
from vdk.plugin.ml_training.k8s.backends import TRAINJOB
from vdk.plugin.ml_training.k8s.run import RunInfo
from vdk.plugin.ml_training.layout import JobImage


def render_run(
    spec: MLJobSpec,
    image: JobImage,
    run: RunInfo,
    namespace: str,
    backend: str,
    trainer_mechanism: str = trainjob.NEWEST_MECHANISM,
    with_record: bool = True,
) -> list[dict]:
    """Manifests in the order to create them. The first one is the run's main object: the
    client makes every later one owned by it, so deleting it (or its TTL) removes them all."""
    if backend == PYTORCHJOB:
        objects = pytorchjob.render(spec, image, run, namespace)
    elif backend == TRAINJOB:
        objects = trainjob.render(spec, image, run, namespace, mechanism=trainer_mechanism)
    elif backend == JOB:
        objects = indexed_job.render(spec, image, run, namespace)
    else:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if with_record:
        objects.append(record.render(spec, image.reference, run, namespace, backend, objects))
    return objects


def limitations(spec: MLJobSpec, backend: str, trainer_mechanism: str = trainjob.NEWEST_MECHANISM) -> list[str]:
    """What of the spec `backend` cannot honour: notes for the deploy command to print."""
    if backend == PYTORCHJOB:
        return pytorchjob.limitations(spec)
    if backend == TRAINJOB:
        return trainjob.limitations(spec, trainer_mechanism)
    return indexed_job.limitations(spec)


def pod_selector(backend: str, run_name: str) -> str:
    """Label selector of a run's training pods (for logs and events)."""
    if backend == PYTORCHJOB:
        return f"training.kubeflow.org/job-name={run_name}"
    if backend == TRAINJOB:
        return f"jobset.sigs.k8s.io/jobset-name={run_name}"
    return f"batch.kubernetes.io/job-name={run_name}"


def to_yaml(manifests: list[dict]) -> str:
    """Multi-document YAML, as `kubectl apply -f -` reads it."""
    return yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, width=1000)
