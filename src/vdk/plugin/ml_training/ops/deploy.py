"""Deploy an ml-training job to Kubernetes: validate -> remote checks (cluster, permissions, registry, base
image, imports, dependencies) at once and beside the smoke run (ops/deploy_checks.py) -> build and push the
image -> render -> apply. `plan_deploy` is the dry run: the same plan, for the image a build would push,
contacting nothing; `build` stops after the push.

    spec = deploy_spec("jobs/mnist", team="vision")
    print(plan_deploy(spec).to_yaml())       # what would start
    result = deploy(spec, reason="nightly")  # result.plan.run.name, result.to_dict()

Progress and notes go to `say` (default: stderr). Heavy modules (kubernetes, the image builder, torch's
launcher) are imported when a deploy runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops import deploy_checks
from vdk.plugin.ml_training.ops.configuration import or_environment
from vdk.plugin.ml_training.ops.deploy_plan import DeployPlan
from vdk.plugin.ml_training.ops.deploy_plan import DeployResult
from vdk.plugin.ml_training.ops.deploy_plan import Target
from vdk.plugin.ml_training.ops.deploy_plan import offline_target
from vdk.plugin.ml_training.ops.deploy_plan import plan_run
from vdk.plugin.ml_training.ops.deploy_plan import where_it_runs
from vdk.plugin.ml_training.ops.notes import Say
from vdk.plugin.ml_training.ops.notes import to_stderr
from vdk.plugin.ml_training.source import audit

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image import Progress
    from vdk.plugin.ml_training.image import PushedImage
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo
    from vdk.plugin.ml_training.ops.local_run import RunWatcher

# The registry a dry run names when none is set: the plan shows where a build would push.
PLACEHOLDER_REGISTRY = "registry.invalid/set-vdk-ml-training-registry"


def deploy_spec(
    job_path: str | Path,
    *,
    name: str | None = None,
    team: str | None = None,
    default_team: str | None = None,
    backend: str | None = None,
    import_check: bool = True,
    configuration: ConfigurationLike | None = None,
    overrides: dict[str, str] | None = None,
) -> MLJobSpec:
    """The spec of the job at `job_path` as a deploy uses it: named `name` (default the directory's name, as
    Kubernetes allows), of the team `team`, else `[owner] team`, else `default_team` (VDK's: `vdk
    set-default`), with that team's namespace and queue; `backend` overrides the job's. `configuration`:
    VDK's (None: the environment's, ops/configuration.py; then [vdk] of the job's config.ini). `overrides`:
    [ml-training] keys for this run only ({key: value}, job/overrides.py), kept in the run's record. A team
    that cannot be a label value is an error here, before any work."""
    settings = job_settings(or_environment(configuration), Path(job_path))
    spec = load_job_spec(Path(job_path), settings, team=team, default_team=default_team, overrides=overrides)
    _check_team(spec)
    changes: dict[str, Any] = {"name": spec.kubernetes_name(name)}
    if backend:
        changes["backend"] = backend
    if not import_check:
        changes["import_check"] = False
    return dataclasses.replace(spec, **changes)


def plan_deploy(
    spec: MLJobSpec,
    *,
    reason: str | None = None,
    provenance: audit.Provenance | None = None,
    say: Say = to_stderr,
    progress: Progress | None = None,
) -> DeployPlan:
    """The dry run: the plan of the image a build would push (said through `say`), the job's imports checked
    against its base, and the run's manifests for it. Contacts no cluster, and no registry but that of a base
    image the builder has to read; a missing registry becomes a placeholder."""
    from vdk.plugin.ml_training.image import StderrProgress
    from vdk.plugin.ml_training.image import plan_image

    provenance = provenance or audit.collect(spec.job_dir)
    registry = spec.registry
    if not registry:
        registry = PLACEHOLDER_REGISTRY
        say("note: no registry is set (VDK_ML_TRAINING_REGISTRY); the image reference below is a placeholder")
    image_plan = plan_image(spec, registry, provenance, progress=progress or StderrProgress())
    say(image_plan.render())
    try:
        deploy_checks.check_imports(spec, image_plan.base)
    except MLTrainingError as e:
        raise deploy_checks.nothing_done(e) from None
    target = offline_target(spec, say)
    say(where_it_runs(spec, target))
    run = _run_info(spec, provenance, reason)
    return plan_run(spec, target, JobImage(image_plan.reference, image_plan.base.python), run, say, image_plan)


def build(
    spec: MLJobSpec,
    *,
    skip_smoke: bool = False,
    provenance: audit.Provenance | None = None,
    say: Say = to_stderr,
    progress: Progress | None = None,
    watcher: RunWatcher | None = None,
) -> PushedImage:
    """Build and push the job's image (after the smoke run and the remote checks but the cluster's), start
    nothing. `watcher` is shown the smoke run. Returns the pushed image: its reference is pinned by digest."""
    provenance = provenance or audit.collect(spec.job_dir)
    registry = require_registry(spec)
    deploy_checks.preflight(
        spec, registry, provenance, with_cluster=False, smoke=not skip_smoke, say=say, watcher=watcher
    )
    return _build(spec, registry, provenance, progress)


def deploy(
    spec: MLJobSpec,
    *,
    reason: str | None = None,
    skip_smoke: bool = False,
    provenance: audit.Provenance | None = None,
    say: Say = to_stderr,
    progress: Progress | None = None,
    watcher: RunWatcher | None = None,
) -> DeployResult:
    """Deploy the job: the smoke run (unless `skip_smoke`) beside the remote checks, then build and push its
    image, render the run for it and create it, all or nothing. `reason` goes to the run's audit trail;
    `watcher` is shown the smoke run.
    Returns the plan applied, the pushed image and what was created. Any problem raises before anything is
    created, saying so; KeyboardInterrupt stops every process it started. The run is created exactly once
    (a create whose answer was lost is found by the run's name) or not at all: a failure or an interruption
    while it is created deletes what was made, or names what could not be deleted with the command that does
    (k8s/creation.py)."""
    provenance = provenance or audit.collect(spec.job_dir)
    registry = require_registry(spec)
    target = deploy_checks.preflight(
        spec, registry, provenance, with_cluster=True, smoke=not skip_smoke, say=say, watcher=watcher
    )
    assert target is not None and target.client is not None
    _say_where(spec, target, say)
    image = _build(spec, registry, provenance, progress)
    run = _run_info(spec, provenance, reason, image)
    plan = plan_run(spec, target, image.job_image, run, say)
    target.client.transport.say = say  # retries of the cluster's requests are said where progress goes
    created = target.client.apply(plan.manifests, say)
    return DeployResult(plan, image, [f"{m['kind']}/{m['metadata']['name']}" for m in created], provenance)


def require_registry(spec: MLJobSpec) -> str:
    """The registry to push the job's image to; an error that says how to set one."""
    if not spec.registry:
        raise MLTrainingError(
            f"no registry to push the image of {spec.name} to",
            "set VDK_ML_TRAINING_REGISTRY=registry.example.com/ml (or `registry = ...` in [ml-training] of "
            f"{spec.config_path}); the cluster must be able to pull from it",
        )
    return spec.registry


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


def _run_info(
    spec: MLJobSpec, provenance: audit.Provenance, reason: str | None, image: PushedImage | None = None
) -> RunInfo:
    from vdk.plugin.ml_training.k8s.run_identity import RunInfo

    if image is None:
        return RunInfo.create(spec, provenance, reason=reason)
    return RunInfo.create(spec, provenance, reason=reason, image_digest=image.digest, dependencies=image.dependencies)


def _say_where(spec: MLJobSpec, target: Target, say: Say) -> None:
    from vdk.plugin.ml_training.k8s.backends import describe_choice

    client = target.client
    assert client is not None and target.discovery is not None
    say(
        f"Cluster: {client.context or 'in-cluster'}, namespace {client.namespace}; "
        f"{describe_choice(target.discovery, spec.backend, target.backend)}"
    )
    say(where_it_runs(spec, target))


def _build(
    spec: MLJobSpec, registry: str, provenance: audit.Provenance, progress: Progress | None = None
) -> PushedImage:
    from vdk.plugin.ml_training.image import StderrProgress
    from vdk.plugin.ml_training.image import build_and_push

    return build_and_push(spec, registry, provenance, progress=progress or StderrProgress())
