"""The pre-flight of a deploy: the remote checks (cluster, permissions, registry, base image, imports,
dependencies; ops/remote_checks.py runs them in threads) started at once, and the smoke run beside them,
stopped by the first check that fails. A remote problem is reported in seconds, not after a smoke run of
minutes and a build. Nothing is pushed and nothing is created by a check."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.ops.deploy_plan import Target
from vdk.plugin.ml_training.ops.local_run import QuietWatcher
from vdk.plugin.ml_training.ops.local_run import RunWatcher
from vdk.plugin.ml_training.ops.local_run import smoke_check
from vdk.plugin.ml_training.ops.notes import Say
from vdk.plugin.ml_training.ops.remote_checks import RemoteCheckFailed
from vdk.plugin.ml_training.ops.remote_checks import RemoteChecks
from vdk.plugin.ml_training.source import audit

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.base_facts import BaseInfo

# The remote checks, by name (the first that fails is named when it stops the smoke run).
CLUSTER_CHECK = "cluster"
REGISTRY_CHECK = "registry"
BASE_CHECK = "base image"
IMPORTS_CHECK = "imports"
DEPENDENCIES_CHECK = "dependencies"


def nothing_done(error: MLTrainingError) -> MLTrainingError:
    """`error`, saying that it stopped the deploy before anything was built or created."""
    return MLTrainingError(f"{error.problem}\nNothing was built or deployed.", error.fix)


def preflight(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    with_cluster: bool,
    smoke: bool,
    say: Say,
    watcher: RunWatcher | None = None,
) -> Target | None:
    """The remote checks, and the smoke run (`smoke`, shown to `watcher`) beside them; raises the first problem
    (that of the check that stopped the smoke run, else the smoke run's, else the first check's to fail).
    Returns where the run goes (None without the cluster: a build only)."""
    checks = start_checks(spec, registry, provenance, with_cluster, say)
    if smoke:
        _smoke_check(spec, checks, say, watcher or QuietWatcher())
    failure = checks.first_failure(say)  # each wait said; the first failure ends it
    if failure is not None:
        raise nothing_done(failure[1])
    return checks.result(CLUSTER_CHECK) if with_cluster else None


def start_checks(
    spec: MLJobSpec, registry: str, provenance: audit.Provenance, with_cluster: bool, say: Say
) -> RemoteChecks:
    """Started at once: the cluster (reachable, namespace, backend, permission to create every object of the
    run and to read them back), the registry (reachable, credentials, push allowed), the base image
    (resolvable, then the job's imports against it and its dependency layer, resolved or cached)."""
    from vdk.plugin.ml_training.image.base_inspection import know_base
    from vdk.plugin.ml_training.image.build_progress import LineProgress
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.dependency_layer import dependency_layer

    def base() -> BaseInfo:
        check_base_reachable(spec)  # a name that does not resolve fails here, at once
        return know_base(spec, Progress())  # silent: the smoke run has the screen, and a base is read in seconds

    # Resolving and installing requirements.txt can take minutes: its steps are lines among the smoke run's.
    dependencies = LineProgress(say, prefix="Pre-flight ")

    checks: dict[str, Any] = {}
    if with_cluster:
        checks[CLUSTER_CHECK] = lambda: check_cluster(spec, provenance, say)
    checks[REGISTRY_CHECK] = lambda: check_push(spec, registry)
    checks[BASE_CHECK] = base
    checks[IMPORTS_CHECK] = lambda: check_imports(spec, remote.result(BASE_CHECK))
    checks[DEPENDENCIES_CHECK] = lambda: dependency_layer(spec, remote.result(BASE_CHECK), dependencies)
    remote = RemoteChecks(checks)
    what = ", ".join(checks)
    say(f"Pre-flight: checking at once {what}{'' if with_cluster else ' (no cluster: --build-only)'}")
    return remote.start()


def check_cluster(spec: MLJobSpec, provenance: audit.Provenance, say: Say) -> Target:
    """Connect, pick the backend, and check that everything the run creates would be accepted: the server's
    dry run of its manifests (with a placeholder image) and permission to read them back."""
    from vdk.plugin.ml_training.k8s.backends import choose_backend
    from vdk.plugin.ml_training.k8s.claims import check_claims
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.manifests import render_run
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo
    from vdk.plugin.ml_training.layout import JobImage

    client = KubeClient(spec.kube_context, spec.namespace)
    discovery = client.discover()
    client.check_namespace()
    check_claims(client, spec, lambda text: say(f"note: {text}"))
    chosen = choose_backend(discovery, spec.backend, spec.nodes.elastic)
    placeholder = JobImage(f"{spec.registry}/{spec.name}:vdk-preflight", spec.base_python or "python3")
    run = RunInfo.create(spec, provenance)
    client.check_access(render_run(spec, placeholder, run, client.namespace, chosen, discovery))
    origin = f"the namespace of kube context {client.context or 'in-cluster'}"
    return Target(client.namespace, origin, chosen, client, discovery)


def check_push(spec: MLJobSpec, registry: str) -> None:
    """The registry is reachable, takes the credentials, and allows a push to the job's repository."""
    from vdk.plugin.ml_training.image.build_plan import target_repository
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.registry import TARGET
    from vdk.plugin.ml_training.image.registry import RegistryClient

    host, repository = target_repository(registry, spec)
    with RegistryClient(host, Progress(), role=TARGET) as client:
        client.check_push(repository)


def check_base_reachable(spec: MLJobSpec) -> None:
    """The base image's registry answers and has it (a HEAD of its manifest), also for a base whose contents the
    builder knows without reading it: the build reads its manifest and layers from there."""
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.reference import parse_reference
    from vdk.plugin.ml_training.image.registry import BASE
    from vdk.plugin.ml_training.image.registry import RegistryClient

    ref = parse_reference(spec.base_image)
    with RegistryClient(ref.registry, Progress(), role=BASE) as client:
        client.check_manifest(ref.repository, ref.ref)


def check_imports(spec: MLJobSpec, base: BaseInfo) -> None:
    """Every import of the job in its image, checked against what the base really has (read from it, once
    per digest, as the build that follows does)."""
    if not spec.import_check:
        return
    from vdk.plugin.ml_training.ops.imports import check_job_imports

    check_job_imports(spec, base.provides)


def _smoke_check(spec: MLJobSpec, checks: RemoteChecks, say: Say, watcher: RunWatcher) -> None:
    """The smoke run, stopped by the first remote check that fails."""
    say("Pre-flight: smoke check (skip with --skip-smoke)")
    again = f"deploy again (`vdk deploy -p {spec.job_dir}`; --skip-smoke if the smoke check itself is wrong)"
    try:
        with checks.interrupting():
            error = smoke_check(spec, again, watcher)
    except RemoteCheckFailed as stopped:
        say(f"\nsmoke run stopped: the {stopped.check} check failed (every process of it was stopped)")
        failure = checks.failure_so_far()
        assert failure is not None
        raise nothing_done(failure[1]) from None
    if error is not None:
        raise nothing_done(error)
