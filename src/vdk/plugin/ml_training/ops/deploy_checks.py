"""The pre-flight of a deploy: the remote checks (cluster, permissions, registry, base image, imports,
dependencies, the datasets pinned to their versions; ops/remote_checks.py runs them in threads) started at once,
and the smoke run beside them, stopped by the first check that fails. A remote problem is reported in seconds,
not after a smoke run of minutes and a build. Nothing is pushed and nothing is created by a check.

The checks talk to the registries through the deploy's BuildSession (image/build_session.py), whose clients push
later: the base check reads the base's manifest, once for the whole deploy (the build extends what was checked),
and the registry check asks the client that pushes. What they find (`Preflight`) goes into the deploy's plan.

`vdk deploy --if-changed` asks first (`decide`, once the checks it needs are done) whether anything changed
since the last successful run: the smoke run is skipped when nothing did."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.ops.deploy_plan import Target
from vdk.plugin.ml_training.ops.local_run import overlay_activity
from vdk.plugin.ml_training.ops.local_run import smoke_check
from vdk.plugin.ml_training.ops.remote_checks import RemoteCheckFailed
from vdk.plugin.ml_training.ops.remote_checks import RemoteChecks
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.vocabulary.human_units import counted

if TYPE_CHECKING:
    from vdk.plugin.ml_training.datafetch.data_pins import DataPin
    from vdk.plugin.ml_training.image.base_facts import BaseInfo
    from vdk.plugin.ml_training.image.build_session import BuildSession
    from vdk.plugin.ml_training.source.job_files import FileSet

# The remote checks, by name (the first that fails is named when it stops the smoke run).
CLUSTER_CHECK = "cluster"
REGISTRY_CHECK = "registry"
BASE_CHECK = "base image"
IMPORTS_CHECK = "imports"
DEPENDENCIES_CHECK = "dependencies"
DATA_CHECK = "data"


@dataclass(frozen=True)
class Preflight:
    """What the checks found that the deploy goes on with (into its plan): where the run goes (None: a build only),
    each dataset pinned, the packages of the dependency layer; and what they worked with: the session (its clients,
    the base read once), the job's files and their hashes (the code manifest), as the smoke run had them."""

    target: Target | None
    session: BuildSession
    files: FileSet
    code: dict[str, str]
    data: tuple[DataPin, ...] = ()
    dependencies: tuple[tuple[str, str], ...] = ()
    skipped: Any = None  # what `decide` returned when it stopped the deploy before the smoke run


# Seconds the other checks get, once one failed, to end: what they find is said with it.
FAILURE_GRACE_SECONDS = 2.0
# The import check is the job's own problem, found on this machine from a base known or read already: once another
# check failed it is waited for (up to this), whatever the machine's load, so that it is said with the other one.
IMPORTS_WAIT_SECONDS = 60.0


def nothing_done(error: MLTrainingError) -> MLTrainingError:
    """`error`, saying that it stopped the deploy before anything was built or created."""
    return MLTrainingError(f"{error.problem}\nNothing was built or deployed.", error.fix)


def failed_checks(checks: RemoteChecks) -> MLTrainingError:
    """The checks' failures as one error (each problem once, each with its fix), saying nothing was done."""
    seen: dict[str, MLTrainingError] = {}
    checks.wait_for(IMPORTS_CHECK, IMPORTS_WAIT_SECONDS)  # not a race with a remote check that failed at once
    for _, error in checks.failures(FAILURE_GRACE_SECONDS):
        seen.setdefault(error.message, error)
    errors = list(seen.values())
    if len(errors) == 1:
        return nothing_done(errors[0])
    problems = "\n".join(f"{i}. {e.problem}" for i, e in enumerate(errors, 1))
    fixes = "\n".join(f"{i}. {e.fix}" for i, e in enumerate(errors, 1) if e.fix)
    return nothing_done(MLTrainingError(f"the pre-flight found {len(errors)} problems:\n{problems}", fixes))


def preflight(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    session: BuildSession,
    files: FileSet,
    with_cluster: bool,
    smoke: bool,
    reporter: Reporter,
    decide: Callable[[RemoteChecks], Any] | None = None,
    code: dict[str, str] | None = None,
) -> Preflight:
    """The remote checks (through `session`), and the smoke run (`smoke`, told to `reporter`, in a working
    directory of `files`: the job's files as the deploy found them) beside them; raises the first problem (that of
    the check that stopped the smoke run, else the smoke run's, else the first check's to fail). `decide(checks)`,
    before the smoke run: what it returns, when not None, stops the deploy there (in `Preflight.skipped`). Returns
    where the run goes (None without the cluster: a build only) and what the checks found; `code`, the files'
    hashes, goes with them."""
    say = reporter.note
    checks = start_checks(spec, registry, provenance, with_cluster, say, session)
    found = Preflight(None, session, files, code or {})
    if decide is not None:
        try:
            skipped = decide(checks)
        except MLTrainingError:
            skipped = None  # the check it waited for failed: reported below, as without `decide`
        if skipped is not None:
            return dataclasses.replace(found, skipped=skipped)
    if smoke:
        _smoke_check(spec, checks, reporter, files)
    if checks.first_failure(say) is not None:  # each wait said; the first failure ends it
        raise failed_checks(checks)
    target = checks.result(CLUSTER_CHECK) if with_cluster else None
    data = checks.result(DATA_CHECK) if DATA_CHECK in checks.names else ()
    layer = checks.result(DEPENDENCIES_CHECK)
    return dataclasses.replace(
        found, target=target, data=data, dependencies=layer.packages if layer is not None else ()
    )


def start_checks(
    spec: MLJobSpec, registry: str, provenance: audit.Provenance, with_cluster: bool, say: Say, session: BuildSession
) -> RemoteChecks:
    """Started at once: the cluster (reachable, namespace, backend, permission to create every object of the
    run and to read them back), the registry (reachable, credentials, push allowed), the base image
    (resolvable, then the job's imports against it and its dependency layer, resolved or cached). The registries
    are the session's: what the checks read of them (the base) is read once for the whole deploy."""
    from vdk.plugin.ml_training.image.base_inspection import know_base
    from vdk.plugin.ml_training.image.build_progress import LineProgress
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.dependency_layer import dependency_layer

    # silent: the smoke run has the screen, and a base is read in seconds (a known or cached one: no request)
    facts = _Once(lambda: know_base(spec, Progress(), session=session))

    def base() -> BaseInfo:
        # Its manifest, also for a base whose contents the builder knows without reading it: a name that does not
        # resolve or a tag that does not exist fails here, at once, and the build extends this very manifest.
        session.base()
        return facts()

    def imports() -> None:  # the job's own problem: said even when the base's registry is out of reach
        try:
            known = facts()
        except MLTrainingError:
            return  # the base image check says why the base cannot be read
        check_imports(spec, known)

    # Resolving and installing requirements.txt can take minutes: its steps are lines among the smoke run's.
    dependencies = LineProgress(say, prefix="Pre-flight: ")

    remote: RemoteChecks  # the dependencies check reads the base check's result through it
    checks: dict[str, Any] = {}
    if with_cluster:
        checks[CLUSTER_CHECK] = lambda: check_cluster(spec, provenance, say)
    checks[REGISTRY_CHECK] = lambda: check_push(spec, registry, session)
    checks[BASE_CHECK] = base
    checks[IMPORTS_CHECK] = imports
    checks[DEPENDENCIES_CHECK] = lambda: dependency_layer(spec, remote.result(BASE_CHECK), dependencies)
    if with_cluster and (spec.data or spec.mounts):
        checks[DATA_CHECK] = lambda: check_data(spec, say)
    remote = RemoteChecks(checks)
    what = ", ".join(checks)
    say(f"Pre-flight: checking at once {what}{'' if with_cluster else ' (no cluster: --build-only)'}")
    return remote.start()


def check_cluster(spec: MLJobSpec, provenance: audit.Provenance, say: Say) -> Target:
    """Connect, pick the backend, and check that everything the run creates would be accepted: the server's
    dry run of its manifests (with a placeholder image) and permission to read them back."""
    from vdk.plugin.ml_training.k8s.backends import choose_backend
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.manifests import render_run
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
    from vdk.plugin.ml_training.k8s.storage.claims import check_claims
    from vdk.plugin.ml_training.layout import JobImage

    client = KubeClient(spec.kube_context, spec.namespace, say=say)  # its retries are notes too
    discovery = client.discover()
    client.check_namespace()
    check_claims(client, spec, lambda text: say(f"note: {text}"))
    if spec.sweep is not None:  # its trials are an Indexed Job whatever the job's backend (no operator needed)
        from vdk.plugin.ml_training.k8s.sweep_manifests import BACKEND as chosen
    else:
        chosen = choose_backend(discovery, spec.backend, spec.nodes.elastic)
    placeholder = JobImage(f"{spec.registry}/{spec.name}:vdk-preflight", spec.base_python or "python3")
    run = RunInfo.create(spec, provenance)
    client.check_access(render_run(spec, placeholder, run, client.namespace, chosen, discovery))
    origin = f"the namespace of kube context {client.context or 'in-cluster'}"
    return Target(client.namespace, origin, chosen, client, discovery)


def check_data(spec: MLJobSpec, say: Say) -> tuple[DataPin, ...]:
    """Every dataset pinned to its version now (ops/data_resolution.py), with the Secrets the pods will read."""
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.ops.data_resolution import resolve_data

    client = KubeClient(spec.kube_context, spec.namespace, say=say)
    return resolve_data(spec, lambda text: say(f"note: {text}"), client)


def check_push(spec: MLJobSpec, registry: str, session: BuildSession) -> None:
    """The registry is reachable, takes the credentials, and allows a push to the job's repository (asked by the
    session's client that pushes later)."""
    from vdk.plugin.ml_training.image.build_plan import target_repository

    _, repository = target_repository(registry, spec)
    assert session.target is not None, "a deploy's session has the registry it pushes to"
    session.target.check_push(repository)


def check_imports(spec: MLJobSpec, base: BaseInfo) -> None:
    """Every import of the job in its image, checked against what the base really has (read from it, once
    per digest, as the build that follows does)."""
    if not spec.import_check:
        return
    from vdk.plugin.ml_training.ops.imports import check_job_imports

    check_job_imports(spec, base.provides)


def _sweep_smoke_check(spec: MLJobSpec, again: str, say: Say, files: FileSet) -> MLTrainingError | None:
    """A sweep's smoke check (ops/sweep_smoke.py): every trial's arguments, the extreme trials' smoke steps."""
    from vdk.plugin.ml_training.ops.sweep_smoke import smoke_check_sweep

    checked = smoke_check_sweep(spec, again, files)
    say(
        f"sweep smoke check: the arguments of {counted(len(checked.trials), 'trial')} checked, "
        f"{counted(len(checked.runs), 'extreme trial')} ran"
    )
    return checked.error


def _smoke_check(spec: MLJobSpec, checks: RemoteChecks, reporter: Reporter, files: FileSet) -> None:
    """The smoke run (in a working directory of `files`), stopped by the first remote check that fails."""
    say = reporter.note
    say("Pre-flight: smoke check (skip with --skip-smoke)")
    again = f"deploy again (`vdk deploy -p {spec.job_dir}`; --skip-smoke if the smoke check itself is wrong)"
    # The overlay's activity is made (and closed at the latest) outside the block where a failed check's signal may
    # raise at any line: one raised between its making and its `try` left its heartbeat "still working" ever after
    activity = overlay_activity(reporter) if spec.sweep is None else None
    try:
        with checks.interrupting():
            error = (
                _sweep_smoke_check(spec, again, say, files)
                if spec.sweep is not None
                else smoke_check(spec, again, reporter, files, activity)
            )
    except RemoteCheckFailed as stopped:
        say(f"\nsmoke run stopped: the {stopped.check} check failed (every process of it was stopped)")
        raise failed_checks(checks) from None
    finally:
        if activity is not None:
            activity.close()
    if error is not None:
        raise nothing_done(error)


class _Once:
    """`make()` called once, by the first thread that asks; the others wait for its result (or error)."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._lock = threading.Lock()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def __call__(self) -> Any:
        with self._lock:
            if not self._done:
                try:
                    self._value = self._make()
                except BaseException as e:  # noqa: BLE001 - each caller gets the same error
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value
