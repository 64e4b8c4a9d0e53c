"""The backends a run can be deployed with, behind one interface (`base.Backend`): `pytorchjob`
(Kubeflow Training Operator v1), `trainjob` (Kubeflow Trainer v2) and `indexed_job` (plain Kubernetes).

This registry is where the rest of the plugin looks them up: the renderers, the client, the status
and diagnosis of runs. Backends register themselves as entry points of the group
`vdk.plugin.ml_training.backends` (setup.cfg): the job spec reads their names from there (job/backend_registry.py),
this module loads their objects, in the same order. Adding a backend is a module that implements `Backend` (with
its `auto_preference`) and its entry point, plus its tests.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.backend_registry import AUTO_BACKEND
from vdk.plugin.ml_training.job.backend_registry import registered
from vdk.plugin.ml_training.k8s.backends.base import Backend
from vdk.plugin.ml_training.k8s.backends.base import Discovery
from vdk.plugin.ml_training.k8s.resources import ResourceType

AUTO = AUTO_BACKEND


def _load(name: str, entry_point: EntryPoint) -> Backend:
    """The object a registered entry point names; it must be the Backend called `name`."""
    backend = entry_point.load()
    if not isinstance(backend, Backend) or backend.name != name:
        raise MLTrainingError(
            f"the backend registered as {name!r} ({entry_point.value}) is not a Backend called {name!r}",
            "correct its entry point (group vdk.plugin.ml_training.backends)",
        )
    return backend


REGISTRY: tuple[Backend, ...] = tuple(_load(name, entry_point) for name, entry_point in registered())
NAMES = tuple(backend.name for backend in REGISTRY)
# What `backend = auto` takes: the first ready one. Elastic jobs prefer a backend that can run them elastic.
AUTO_PREFERENCE: tuple[Backend, ...] = tuple(sorted(REGISTRY, key=lambda backend: backend.auto_preference))

_BY_NAME = {backend.name: backend for backend in REGISTRY}
_BY_MAIN_TYPE = {(backend.main.api_version, backend.main.kind): backend for backend in REGISTRY}


def get(name: str) -> Backend:
    """The backend called `name`; ValueError for any other name."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown backend {name!r}; expected one of {NAMES}")
    return _BY_NAME[name]


def find(name: str | None) -> Backend | None:
    """The backend called `name` (a run's vdk.io/backend label), or None."""
    return _BY_NAME.get(name or "")


def of_object(obj: dict) -> Backend | None:
    """The backend whose main object `obj` is, or None."""
    return _BY_MAIN_TYPE.get((obj.get("apiVersion", ""), obj.get("kind", "")))


def created_types() -> tuple[ResourceType, ...]:
    """Every resource type a backend's manifests hold."""
    return tuple(dict.fromkeys(rtype for backend in REGISTRY for rtype in backend.creates))


def group_versions() -> tuple[str, ...]:
    """The API group versions of the backends' main objects: what discovery reads."""
    return tuple(dict.fromkeys(backend.main.api_version for backend in REGISTRY))


def choose_backend(discovery: Discovery, requested: str, elastic: bool = False) -> str:
    """The backend to deploy with. `auto`: the first of AUTO_PREFERENCE that is ready (TrainJob when
    Trainer v2 and its torch-distributed runtime are served, else PyTorchJob, else a plain Indexed Job),
    but for elastic jobs the first ready one that runs them elastic. An explicit backend the cluster
    cannot run is an MLTrainingError that names what to install."""
    if requested == AUTO:
        ready = [backend for backend in AUTO_PREFERENCE if backend.ready(discovery)]
        if not ready:
            raise AUTO_PREFERENCE[-1].unavailable(discovery) or _unknown(requested)
        if elastic:
            ready = [backend for backend in ready if backend.elastic] or ready
        return ready[0].name
    backend = find(requested)
    if backend is None:
        raise _unknown(requested)
    problem = backend.unavailable(discovery)
    if problem is not None:
        raise problem
    return backend.name


def _unknown(requested: str) -> MLTrainingError:
    return MLTrainingError(f"unknown backend {requested!r}", f"use one of {AUTO}, {', '.join(NAMES)}")


def describe_choice(discovery: Discovery, requested: str, chosen: str) -> str:
    """One line on why `chosen` runs the job, for the deploy command to print."""
    if requested != AUTO:
        return f"backend {chosen} (set in the job's config)"
    operators = [b for b in AUTO_PREFERENCE if b.operator and discovery.serves(b.main)]
    served = ", ".join(b.title for b in operators) or "no training operator"
    line = f"backend {chosen} (auto; the cluster serves {served})"
    for backend in operators:
        why = backend.passed_over(discovery) if backend.name != chosen else None
        if why:
            line += f"; {backend.title} not used: {why}"
    return line
