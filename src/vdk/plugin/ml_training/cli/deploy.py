"""`vdk deploy -p JOB` for ml-training jobs: validate -> remote checks (cluster, permissions, registry,
base image, imports, dependencies: cli/remote_checks.py) at once and during the smoke check -> build and
push the image -> render -> apply -> say what started and how to follow it. SIGINT, SIGTERM and SIGHUP
stop it with every process it started (cli/interrupts.py).

stdout carries only the result (the manifests of `--dry-run`, the image reference of `--build-only`,
the run of a deploy, or JSON with `-o json`); progress and notes go to stderr. Heavy modules
(kubernetes, the image builder, torch's launcher) are imported when a deploy runs, not when vdk starts.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import click

from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.context import fail
from vdk.plugin.ml_training.cli.context import settings_from_click
from vdk.plugin.ml_training.cli.context import team_option
from vdk.plugin.ml_training.cli.remote_checks import RemoteCheckFailed
from vdk.plugin.ml_training.cli.remote_checks import RemoteChecks
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import AUTO_BACKEND
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import backend_choices
from vdk.plugin.ml_training.job import is_ml_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import ml_config_problem
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.source import audit

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.base_facts import BaseInfo
    from vdk.plugin.ml_training.image.build import PushedImage
    from vdk.plugin.ml_training.k8s.backends import Discovery
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo
    from vdk.plugin.ml_training.layout import JobImage

# What a dry run shows for `backend = auto`: it cannot ask the cluster, and this one runs anywhere.
DRY_RUN_AUTO_BACKEND = "job"


def _is_ml(kwargs: dict[str, Any]) -> bool:
    path = kwargs.get("job_path")
    if not path or is_ml_job(Path(path)):
        return bool(path)
    problem = ml_config_problem(Path(path))  # meant as ml-training, but broken or misnamed
    if problem is not None:
        fail(problem)
    return False


def _not_ml_reason(kwargs: dict[str, Any]) -> str:
    path = kwargs.get("job_path")
    if not path:
        return "Missing option -p/--job-path: the job directory to deploy."
    return f"{path} is not an ml-training job (its config.ini has no `[job] type = ml-training`)."


def _stderr(text: str) -> None:
    click.echo(text, err=True)


@dataclass(frozen=True)
class DeployRequest:
    """What `vdk deploy -p JOB` was asked to do (its options)."""

    job_path: Path
    name: str | None = None
    team: str | None = None  # -t as given
    reason: str | None = None
    output: str = "text"  # text | json
    dry_run: bool = False
    skip_smoke: bool = False
    build_only: bool = False
    backend: str | None = None
    default_team: str | None = None  # VDK's default team (`vdk set-default`)
    skip_import_check: bool = False


@dataclass(frozen=True)
class ClusterTarget:
    """Where a run goes: a connected cluster, what it serves, and the backend chosen there."""

    client: KubeClient
    discovery: Discovery
    backend: str


def deploy_ml(
    job_path: str,
    name: str | None,
    team: str | None,
    reason: str | None,
    output: str | None,
    dry_run: bool,
    skip_smoke: bool,
    build_only: bool,
    backend: str | None,
    skip_import_check: bool = False,
) -> None:
    try:
        option, default_team = team_option(team)
        request = DeployRequest(
            Path(job_path),
            name,
            option,
            reason,
            (output or "text").lower(),
            dry_run,
            skip_smoke,
            build_only,
            backend,
            default_team,
            skip_import_check,
        )
        _deploy(request)
    except MLTrainingError as e:
        fail(e)


def _deploy(request: DeployRequest) -> None:
    if request.dry_run and request.build_only:
        raise MLTrainingError(
            "--dry-run and --build-only exclude each other",
            "use --dry-run to see what would be built and started (nothing is contacted), "
            "or --build-only to build and push the image",
        )
    spec = _spec(request)
    if request.skip_import_check:
        spec = dataclasses.replace(spec, import_check=False)
    provenance = audit.collect(spec.job_dir)
    if request.dry_run:
        return _dry_run(spec, provenance, request.reason)
    registry = _require_registry(spec)
    with interrupts.stop_on_signals():
        try:
            _checked_deploy(spec, registry, provenance, request)
        except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: what was started is stopped already
            interrupts.exit_interrupted(e, f"vdk deploy interrupted by {interrupts.as_interrupted(e).name}.")


def _checked_deploy(spec: MLJobSpec, registry: str, provenance: audit.Provenance, request: DeployRequest) -> None:
    # Remote problems are found in seconds, while the smoke run runs, not after it and a build.
    checks = _remote_checks(spec, registry, provenance, with_cluster=not request.build_only)
    if not request.skip_smoke:
        _smoke_check(spec, checks)
    failure = checks.first_failure()
    if failure is not None:
        raise _nothing_done(failure[1])
    target = None if request.build_only else checks.result(CLUSTER_CHECK)
    if target is not None:
        _say_where(spec, target)
    image = _build(spec, registry, provenance)
    if target is None:
        if request.output == "json":
            click.echo(json.dumps(image.to_dict(), indent=2))
        else:
            _stderr(f"Built {spec.name}: {len(image.dependencies)} dependencies, {len(image.layers)} layers")
            click.echo(image.reference)
        return
    _apply(spec, image, provenance, request, target)


def _spec(request: DeployRequest) -> MLJobSpec:
    """The job's spec with the team of -t, else [owner] team, else the default team (and that team's
    namespace and queue); a team that cannot be a label value is an error here, before any work."""
    settings = settings_from_click(request.job_path)
    spec = load_job_spec(request.job_path, settings, team=request.team, default_team=request.default_team)
    _check_team(spec)
    changes: dict[str, Any] = {"name": spec.kubernetes_name(request.name)}
    if request.backend:
        changes["backend"] = request.backend
    return dataclasses.replace(spec, **changes)


def _check_team(spec: MLJobSpec) -> None:
    problem = teams.label_problem(spec.team) if spec.team else None
    if problem is None:
        return
    better = teams.suggested_name(spec.team or "")
    origin = spec.origin("team")
    if origin == teams.FROM_OPTION:
        raise MLTrainingError(f"-t: {problem}", f"deploy with `-t {better}`")
    if origin == teams.FROM_DEFAULT:
        raise MLTrainingError(
            f"your default team (`vdk set-default`): {problem}",
            f"set it with `vdk set-default -t {better}`, or name the team with -t or `[owner] team` of "
            f"{spec.config_path}",
        )
    raise JobConfigError(
        spec.config_path,
        problem,
        f"write `team = {better}` under [owner] (or deploy with `-t {better}`)",
        "owner",
        "team",
    )


def _where_it_runs(spec: MLJobSpec, namespace: str, namespace_origin: str) -> str:
    """Team, namespace and queue of the run and where each came from (stderr of a deploy and a dry run)."""
    team = f"{spec.team}  ({spec.origin('team')})" if spec.team else "none (no -t, [owner] team or default team)"
    lines = ["Where it runs:", f"  team       {team}"]
    lines.append(f"  namespace  {namespace}  ({spec.origin('namespace') or namespace_origin})")
    if spec.queue:
        lines.append(f"  queue      {spec.queue}  ({spec.origin('queue')})")
    return "\n".join(lines)


def _follow_hint(spec: MLJobSpec, default_team: str | None) -> str:
    """How to follow the run: with -t unless its team is the default team the verbs choose anyway."""
    label = teams.normalise(spec.team) if spec.team else ""
    team = "" if teams.same_team(spec.team, default_team) else f" -t {shlex.quote(label)}"
    return (
        f"Follow it:  vdk show -n {spec.name}{team}      logs of every rank:  vdk execute --logs -n {spec.name}{team}"
    )


def _require_registry(spec: MLJobSpec) -> str:
    if not spec.registry:
        raise MLTrainingError(
            f"no registry to push the image of {spec.name} to",
            "set VDK_ML_TRAINING_REGISTRY=registry.example.com/ml (or `registry = ...` in [ml-training] of "
            f"{spec.config_path}); the cluster must be able to pull from it",
        )
    return spec.registry


def _import_check(spec: MLJobSpec, base: BaseInfo) -> None:
    """Every import of the job in its image, checked against what the base really has (read from it, once
    per digest, as the build that follows does)."""
    if not spec.import_check:
        return
    from vdk.plugin.ml_training.ops.imports import check_job_imports

    check_job_imports(spec, base.provides)


def _nothing_done(error: MLTrainingError) -> MLTrainingError:
    return MLTrainingError(f"{error.problem}\nNothing was built or deployed.", error.fix)


# The remote checks, by name (the first that fails is named when it stops the smoke run).
CLUSTER_CHECK = "cluster"
REGISTRY_CHECK = "registry"
BASE_CHECK = "base image"
IMPORTS_CHECK = "imports"
DEPENDENCIES_CHECK = "dependencies"


def _remote_checks(spec: MLJobSpec, registry: str, provenance: audit.Provenance, with_cluster: bool) -> RemoteChecks:
    """Started at once: the cluster (reachable, namespace, backend, permission to create every object of the
    run and to read them back), the registry (reachable, credentials, push allowed), the base image
    (resolvable, then the job's imports against it and its dependency layer, resolved or cached)."""
    from vdk.plugin.ml_training.image.base_inspection import know_base
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.dependency_layer import dependency_layer

    def base() -> BaseInfo:
        return know_base(spec, Progress())  # silent: the smoke run has the screen

    checks: dict[str, Any] = {}
    if with_cluster:
        checks[CLUSTER_CHECK] = lambda: _cluster(spec, provenance)
    checks[REGISTRY_CHECK] = lambda: _check_push(spec, registry)
    checks[BASE_CHECK] = base
    checks[IMPORTS_CHECK] = lambda: _import_check(spec, remote.result(BASE_CHECK))
    checks[DEPENDENCIES_CHECK] = lambda: dependency_layer(spec, remote.result(BASE_CHECK), Progress())
    remote = RemoteChecks(checks)
    what = ", ".join(checks)
    _stderr(f"Pre-flight: checking at once {what}{'' if with_cluster else ' (no cluster: --build-only)'}")
    return remote.start()


def _check_push(spec: MLJobSpec, registry: str) -> None:
    from vdk.plugin.ml_training.image.build_plan import target_repository
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.registry import RegistryClient

    host, repository = target_repository(registry, spec)
    with RegistryClient(host, Progress()) as client:
        client.check_push(repository)


def _smoke_check(spec: MLJobSpec, checks: RemoteChecks) -> None:
    """The smoke run, stopped by the first remote check that fails."""
    from vdk.plugin.ml_training.cli.local_summary import SummaryPrinter
    from vdk.plugin.ml_training.ops.local_run import smoke_check

    _stderr("Pre-flight: smoke check (skip with --skip-smoke)")
    again = f"deploy again (`vdk deploy -p {spec.job_dir}`; --skip-smoke if the smoke check itself is wrong)"
    try:
        with checks.interrupting():
            error = smoke_check(spec, again, SummaryPrinter(err=True))
    except RemoteCheckFailed as stopped:
        _stderr(f"\nsmoke run stopped: the {stopped.check} check failed (every process of it was stopped)")
        failure = checks.failure_so_far()
        assert failure is not None
        raise _nothing_done(failure[1]) from None
    if error is not None:
        raise _nothing_done(error)


def _cluster(spec: MLJobSpec, provenance: audit.Provenance) -> ClusterTarget:
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
    check_claims(client, spec, lambda text: _stderr(f"note: {text}"))
    chosen = choose_backend(discovery, spec.backend, spec.nodes.elastic)
    placeholder = JobImage(f"{spec.registry}/{spec.name}:vdk-preflight", spec.base_python or "python3")
    run = RunInfo.create(spec, provenance)
    client.check_access(render_run(spec, placeholder, run, client.namespace, chosen, discovery))
    return ClusterTarget(client, discovery, chosen)


def _say_where(spec: MLJobSpec, target: ClusterTarget) -> None:
    from vdk.plugin.ml_training.k8s.backends import describe_choice

    client = target.client
    _stderr(
        f"Cluster: {client.context or 'in-cluster'}, namespace {client.namespace}; "
        f"{describe_choice(target.discovery, spec.backend, target.backend)}"
    )
    _stderr(_where_it_runs(spec, client.namespace, f"the namespace of kube context {client.context or 'in-cluster'}"))


def _build(spec: MLJobSpec, registry: str, provenance: audit.Provenance) -> PushedImage:
    from vdk.plugin.ml_training.image import StderrProgress
    from vdk.plugin.ml_training.image import build_and_push

    return build_and_push(spec, registry, provenance, progress=StderrProgress())


def _render(
    spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, backend: str, cluster: Discovery | None
) -> list[dict]:
    """The run's manifests, for a deploy and a dry run alike; what the backend cannot honour goes to stderr."""
    from vdk.plugin.ml_training.k8s.manifests import limitations
    from vdk.plugin.ml_training.k8s.manifests import render_run

    for note in limitations(spec, backend, cluster):
        _stderr(f"note: {note}")
    return render_run(spec, image, run, namespace, backend, cluster)


def _apply(
    spec: MLJobSpec, image: PushedImage, provenance: audit.Provenance, request: DeployRequest, target: ClusterTarget
) -> None:
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo

    client, backend = target.client, target.backend
    run = RunInfo.create(
        spec, provenance, reason=request.reason, image_digest=image.digest, dependencies=image.dependencies
    )
    manifests = _render(spec, image.job_image, run, client.namespace, backend, target.discovery)
    created = client.apply(manifests)
    result = {
        "job_name": spec.name,
        "job_team": spec.team,
        "run": run.name,
        "backend": backend,
        "namespace": client.namespace,
        "context": client.context,
        "image": image.reference,
        "created": [f"{m['kind']}/{m['metadata']['name']}" for m in created],
        "git_commit": provenance.git_commit,
        "git_dirty": provenance.git_dirty if provenance.git_commit else None,  # None: not in git
        "dependencies": dict(image.dependencies),
    }
    if request.output == "json":
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(
        "\n".join(
            [
                f"Started run {run.name} of {spec.name} ({backend}, namespace {client.namespace}): "
                f"{spec.nodes} node(s) x {spec.gpus_per_node} GPU(s), {spec.procs_per_node} process(es) per node",
                f"  image   {image.reference}",
                f"  created {', '.join(result['created'])}",
                _follow_hint(spec, request.default_team),
            ]
        )
    )


def _dry_run(spec: MLJobSpec, provenance: audit.Provenance, reason: str | None) -> None:
    """Manifests on stdout, the image plan on stderr; contacts no cluster (and no registry but that
    of a base image the builder has to read)."""
    from vdk.plugin.ml_training.image import StderrProgress
    from vdk.plugin.ml_training.image import plan_image
    from vdk.plugin.ml_training.k8s.manifests import to_yaml
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo
    from vdk.plugin.ml_training.layout import JobImage

    registry = spec.registry
    if not registry:
        registry = "registry.invalid/set-vdk-ml-training-registry"
        _stderr("note: no registry is set (VDK_ML_TRAINING_REGISTRY); the image reference below is a placeholder")
    plan = plan_image(spec, registry, provenance, progress=StderrProgress())
    _stderr(plan.render())
    try:
        _import_check(spec, plan.base)
    except MLTrainingError as e:
        raise _nothing_done(e) from None
    backend = spec.backend
    if backend == AUTO_BACKEND:
        backend = DRY_RUN_AUTO_BACKEND
        _stderr(
            f"note: backend = auto is decided by what the cluster serves; a dry run asks no cluster, so it shows "
            f"`{backend}` (see the others with --backend pytorchjob|trainjob)"
        )
    local = None if spec.namespace else _local_namespace(spec)
    namespace = spec.namespace or local or "default"
    kube = "the kube context's namespace" if local else "no namespace is set and no kube context has one"
    _stderr(_where_it_runs(spec, namespace, kube))
    run = RunInfo.create(spec, provenance, reason=reason)
    click.echo(
        to_yaml(_render(spec, JobImage(plan.reference, plan.base.python), run, namespace, backend, None)), nl=False
    )


def _local_namespace(spec: MLJobSpec) -> str | None:
    """The kube context's namespace as the kubeconfig file says (a local read, no connection)."""
    from vdk.plugin.ml_training.k8s.client import KubeClient

    try:
        return KubeClient(spec.kube_context, None).namespace
    except MLTrainingError:
        return None


DEPLOY = verbs.Verb(
    name="deploy",
    help="Deploy an ml-training job: smoke check, build and push its image, start it on Kubernetes.",
    ml_help=(
        "ml-training jobs (config.ini `[job] type = ml-training`): `vdk deploy -p JOB` runs the smoke check, builds "
        "and pushes the job's image, and starts distributed training on Kubernetes. --dry-run prints the "
        "manifests and contacts nothing; --build-only pushes the image and prints its reference."
    ),
    params=[
        click.Option(
            ["-p", "--job-path"],
            type=click.Path(exists=True, file_okay=False, dir_okay=True, resolve_path=True),
            help="Path to the job directory.",
        ),
        click.Option(["-n", "--name"], help="The job name [the job directory's name]."),
        click.Option(
            ["-t", "--team"],
            help="The team the job belongs to [[owner] team of config.ini, else your default team: `vdk set-default`]",
        ),
        click.Option(["-r", "--reason"], help="Why this deploy: kept in the run's audit trail."),
        click.Option(
            ["-o", "--output"],
            type=click.Choice(["text", "json"], case_sensitive=False),
            default="text",
            help="Format of the result on stdout.",
        ),
        click.Option(
            ["--dry-run"],
            is_flag=True,
            help="ml-training: print the manifests (YAML) and the image plan; contact nothing.",
        ),
        click.Option(["--skip-smoke"], is_flag=True, help="ml-training: do not run the smoke check first."),
        click.Option(
            ["--skip-import-check"],
            is_flag=True,
            help="ml-training: do not check first that the image has every module the job imports.",
        ),
        click.Option(
            ["--build-only"],
            is_flag=True,
            help="ml-training: build and push the image, print its reference, start nothing.",
        ),
        click.Option(
            ["--backend"],
            type=click.Choice(list(backend_choices()), case_sensitive=False),
            help="ml-training: override `backend` of [ml-training] (auto, pytorchjob, trainjob, job).",
        ),
    ],
    ml_only=("dry_run", "skip_smoke", "build_only", "backend", "skip_import_check"),
    is_ml=_is_ml,
    run_ml=deploy_ml,
    not_ml_reason=_not_ml_reason,
)
