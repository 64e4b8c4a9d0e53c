"""Deploy an ml-training job to Kubernetes, as the execution of its plan: validate -> remote checks (cluster,
permissions, registry, base image, imports, dependencies, datasets pinned) at once and beside the smoke run
(ops/deploy_checks.py) -> the plan (`plan_deploy` with what the checks found: the image assembled, the run's
record and manifests, what changed since the job's last run: ops/deploy_changes.py) -> its execution (`execute`:
push that image, create those manifests). The dry run is `plan_deploy` without the checks: the same plan for the
image a build would push, contacting nothing, printed. `build` stops after the push. With `if_changed`, nothing is
started (an `Unchanged` is returned) when nothing changed since the job's last successful run.

    spec = deploy_spec("jobs/mnist", team="vision")
    print(plan_deploy(spec).to_yaml())       # what would start
    result = deploy(spec, reason="nightly")  # result.plan.run.name, result.to_dict()
    result = deploy(spec, if_changed=True)   # an Unchanged when code, requirements, config, base and data are

One deploy reads config.ini once (`deploy_spec`), parses the base reference once (the spec holds it), walks and
hashes the job directory once, and talks to each registry through one client (image/build_session.py), reading
the base's manifest once.

What they do as they go is told to `reporter` (ops/reporting.py; default: nothing). Heavy modules (kubernetes,
the image builder, torch's
launcher) are imported when a deploy runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.image import signing
from vdk.plugin.ml_training.image.image_facts import BuildParameters
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import job_config
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops import deploy_changes
from vdk.plugin.ml_training.ops import deploy_checks
from vdk.plugin.ml_training.ops.configuration import or_environment
from vdk.plugin.ml_training.ops.deploy_changes import Changes
from vdk.plugin.ml_training.ops.deploy_checks import Preflight
from vdk.plugin.ml_training.ops.deploy_plan import DeployPlan
from vdk.plugin.ml_training.ops.deploy_plan import DeployResult
from vdk.plugin.ml_training.ops.deploy_plan import PlannedBuild
from vdk.plugin.ml_training.ops.deploy_plan import Target
from vdk.plugin.ml_training.ops.deploy_plan import Unchanged
from vdk.plugin.ml_training.ops.deploy_plan import offline_target
from vdk.plugin.ml_training.ops.deploy_plan import plan_run
from vdk.plugin.ml_training.ops.deploy_plan import where_it_runs
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import scan_job_dir

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image import Progress
    from vdk.plugin.ml_training.image import PushedImage
    from vdk.plugin.ml_training.image.attestations import Request
    from vdk.plugin.ml_training.image.build_session import BuildSession
    from vdk.plugin.ml_training.image.signing import SigningKey
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo

# The registry a dry run names when none is set: the plan shows where a build would push.
PLACEHOLDER_REGISTRY = "registry.invalid/set-vdk-ml-training-registry"


@checked
def deploy_spec(
    job_path: str | Path | JobConfig,
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
    that cannot be a label value is an error here, before any work. `job_path` may be the job's config.ini read
    already (job.read_job_config); else it is read here, once, for the settings and the spec."""
    config = job_config(job_path)
    settings = job_settings(or_environment(configuration), config)
    spec = load_job_spec(config, settings, team=team, default_team=default_team, overrides=overrides)
    _check_team(spec)
    changes: dict[str, Any] = {"name": spec.kubernetes_name(name)}
    if backend:
        changes["backend"] = backend
    if spec.sweep is not None:
        from vdk.plugin.ml_training.k8s import sweep_manifests

        sweep_manifests.check(spec)  # before any work (its trials are an Indexed Job, whatever the backend)
    if not import_check:
        changes["import_check"] = False
    return dataclasses.replace(spec, **changes)


@checked
def plan_deploy(
    spec: MLJobSpec,
    *,
    reason: str | None = None,
    provenance: audit.Provenance | None = None,
    reporter: Reporter | None = None,
    checked: Preflight | None = None,
    attest: Request | None = None,
) -> DeployPlan:
    """What a deploy starts: the plan `deploy` executes, and the one its dry run prints.

    Without `checked`, the dry run's: the plan of the image a build would push (a note of `reporter`), the job's
    imports checked against its base, and the run's manifests for it, where the run goes as far as that is known
    without a cluster. Contacts no cluster, and no registry but that of a base image the builder has to read; a
    missing registry becomes a placeholder.

    With `checked` (what a deploy's pre-flight found: ops/deploy_checks.py), the deploy's: the run goes where the
    cluster check said, the image is assembled from the base the checks read and the files the smoke run had (its
    layers written, its digest known; nothing pushed), the run's record names that image, its dependencies, its
    datasets pinned and its files' hashes, and the plan says what the run changes since the job's last run;
    `attest`: what is attached to the image when it is pushed (its SBOM and provenance, signed or not)."""
    reporter = or_quiet(reporter)
    say = reporter.note
    provenance = provenance or audit.collect(spec.job_dir)
    if checked is not None:
        return _checked_plan(spec, checked, reason, provenance, say, reporter.progress, attest)
    from vdk.plugin.ml_training.image import plan_image
    from vdk.plugin.ml_training.image.attestations import describe_plan

    registry = spec.registry
    if not registry:
        registry = PLACEHOLDER_REGISTRY
        say(f"note: no registry is set ({variable('registry')}); the image reference below is a placeholder")
    image_plan = plan_image(spec, registry, provenance, progress=reporter.progress)
    say(image_plan.render())
    say(describe_plan(spec.attestations, signing_key(spec)))
    try:
        deploy_checks.check_imports(spec, image_plan.base)
    except MLTrainingError as e:
        raise deploy_checks.nothing_done(e) from None
    target = offline_target(spec, say)
    say(where_it_runs(spec, target))
    if any(d.fetched for d in spec.data):
        say(
            "note: `vdk deploy` pins each dataset of [ml-training.data] to its version (a dry run asks no store): "
            "these manifests name them unresolved, and their data step refuses to fetch them"
        )
    run = _run_info(spec, provenance, reason)
    return plan_run(spec, target, JobImage(image_plan.reference, image_plan.base.python), run, say, image_plan)


def _checked_plan(
    spec: MLJobSpec,
    found: Preflight,
    reason: str | None,
    provenance: audit.Provenance,
    say: Say,
    progress: Progress,
    attest: Request | None,
) -> DeployPlan:
    """A deploy's plan, from what its pre-flight found."""
    from vdk.plugin.ml_training.image.build import assemble
    from vdk.plugin.ml_training.image.provenance import now
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo

    target = found.target
    if target is None or target.client is None:
        raise MLTrainingError(
            f"the pre-flight of {spec.name} did not check a cluster, so there is no run to plan",
            "plan a deploy with its cluster check (ops.deploy.deploy), or a build alone with ops.deploy.build",
        )
    _say_where(spec, target, say)
    found.session.report_to(progress)  # the checks' clients were silent: the build is shown
    started = now()
    registry = require_registry(spec)
    image = assemble(spec, registry, provenance, found.session, progress, files=found.files, code=found.code)
    base = str(image.base.reference)
    code_files = tuple(sorted(found.code.items()))
    run = RunInfo.create(
        spec,
        provenance,
        reason=reason,
        image_digest=image.digest,
        dependencies=image.dependencies,
        data=found.data,
        code_files=code_files,
        base_digest=base,
    )
    state = deploy_changes.current_state(spec, found.data, image.dependencies, base, found.code)
    changes = deploy_changes.changes(target.client, spec, state)
    job_image = JobImage(image.reference, image.python)
    build = PlannedBuild(image, found.session, attest, started)
    return plan_run(spec, target, job_image, run, say, build=build, changes=changes)


@checked
def execute(
    plan: DeployPlan,
    *,
    reporter: Reporter | None = None,
    if_changed: bool = False,
) -> DeployResult | Unchanged:
    """Carry out a deploy's plan (`plan_deploy` with what a pre-flight found): say what the run changes since the
    job's last run (`reporter.changes`, before anything starts), push the image the plan assembled, then create the
    plan's manifests, all or nothing (k8s/creation.py). A dry run's plan has nothing to push: an error says so.
    `if_changed`: all of it while this command holds the job's lease (k8s/lease.py), after the job's runs were
    read again: an `Unchanged` when a run of the same state has started since the plan was made (another
    `vdk deploy --if-changed` of the job, at the same time), so that concurrent invocations start one run."""
    reporter = or_quiet(reporter)
    client = plan.target.client
    if plan.build is None or client is None:
        raise MLTrainingError(
            f"the plan of {plan.spec.name} is a dry run's: no image was assembled and no cluster was checked",
            "deploy with ops.deploy.deploy(spec), which checks, plans and executes",
        )
    if not if_changed:
        return _push_and_create(plan, client, reporter)
    from vdk.plugin.ml_training.k8s import lease
    from vdk.plugin.ml_training.k8s.runs.identity import LABEL_JOB
    from vdk.plugin.ml_training.k8s.runs.identity import LABEL_MANAGED_BY
    from vdk.plugin.ml_training.k8s.runs.identity import MANAGED_BY

    spec, run = plan.spec, plan.run
    name = f"{spec.kubernetes_name()}-deploy"
    labels = {LABEL_JOB: spec.kubernetes_name(), LABEL_MANAGED_BY: MANAGED_BY}
    with lease.hold(client, name, reporter.note, f"deploying {spec.name} with --if-changed", labels):
        client.forget_job(spec.kubernetes_name())  # the runs as they are now: another deploy may have started one
        state = deploy_changes.current_state(spec, run.data, run.dependencies, run.base_digest, dict(run.code_files))
        changes = deploy_changes.changes(client, spec, state, with_active=True)
        if changes.repeats is not None:
            return _unchanged_result(spec, plan.target.namespace, changes)
        return _push_and_create(dataclasses.replace(plan, changes=changes), client, reporter)


def _push_and_create(plan: DeployPlan, client: KubeClient, reporter: Reporter) -> DeployResult:
    from vdk.plugin.ml_training.image.build import push

    say = reporter.note
    if plan.changes is not None:
        reporter.changes(plan.changes)
    build = plan.build
    assert build is not None
    image = push(build.image, build.session, reporter.progress, build.attest, plan.run.provenance, build.started)
    _say_attached(build.attest, say)
    assert image.reference == plan.image.reference, "the image pushed is the one the plan's manifests run"
    client.transport.say = say  # retries of the cluster's requests are said where progress goes
    created = client.apply(plan.manifests, say)
    created_names = [f"{m['kind']}/{m['metadata']['name']}" for m in created]
    return DeployResult(plan, image, created_names, plan.run.provenance, plan.changes)


@checked
def build(
    spec: MLJobSpec,
    *,
    skip_smoke: bool = False,
    provenance: audit.Provenance | None = None,
    reporter: Reporter | None = None,
) -> PushedImage:
    """Build and push the job's image (after the smoke run and the remote checks but the cluster's), start
    nothing. `reporter` is told the smoke run. Returns the pushed image: its reference is pinned by digest."""
    from vdk.plugin.ml_training.image.build import assemble
    from vdk.plugin.ml_training.image.build import push
    from vdk.plugin.ml_training.image.provenance import now

    reporter = or_quiet(reporter)
    say = reporter.note
    provenance = provenance or audit.collect(spec.job_dir)
    registry = require_registry(spec)
    key = signing_key(spec)  # a key that cannot be used stops the build before any work
    with _session(spec, registry) as session:
        files = scan_job_dir(spec.job_dir)  # once: the smoke run's working directory and the code layer
        found = deploy_checks.preflight(
            spec, registry, provenance, session, files, with_cluster=False, smoke=not skip_smoke, reporter=reporter,
        )  # fmt: skip
        progress = reporter.progress
        session.report_to(progress)
        started = now()
        attest = _attest(spec, provenance, found.data, key)
        image = assemble(spec, registry, provenance, session, progress, files=files)
        pushed = push(image, session, progress, attest, provenance, started)
        _say_attached(attest, say)
        return pushed


@checked
def deploy(
    spec: MLJobSpec,
    *,
    reason: str | None = None,
    skip_smoke: bool = False,
    provenance: audit.Provenance | None = None,
    reporter: Reporter | None = None,
    if_changed: bool = False,
) -> DeployResult | Unchanged:
    """Deploy the job: the smoke run (unless `skip_smoke`) beside the remote checks, then the plan they make
    possible (`plan_deploy`: the image assembled, the run's manifests, what changed since the job's last run), then
    its execution (`execute`: what changed is told to `reporter.changes`, the image pushed, the run created).
    `reason` goes to the run's audit trail; `reporter` is told the smoke run.
    `if_changed`: when neither the code, the requirements, the configuration, the base image nor a dataset
    changed since the job's last successful run, nothing is built or started: an `Unchanged` says so.
    Returns the plan applied, the pushed image and what was created. Any problem raises before anything is
    created, saying so; KeyboardInterrupt stops every process it started. The run is created exactly once
    (a create whose answer was lost is found by the run's name) or not at all: a failure or an interruption
    while it is created deletes what was made, or names what could not be deleted with the command that does
    (k8s/creation.py). One client per registry, and one reading of the base's manifest, serve the whole deploy;
    the job directory is walked and hashed once."""
    from vdk.plugin.ml_training.image.code_manifest import code_manifest

    reporter = or_quiet(reporter)
    say = reporter.note
    provenance = provenance or audit.collect(spec.job_dir)
    registry = require_registry(spec)
    key = signing_key(spec)  # a key that cannot be used stops the deploy before any work
    with _session(spec, registry) as session:
        files = scan_job_dir(spec.job_dir)  # once: the smoke run's working directory, the code layer, the changes
        code = code_manifest(files)
        decide = (lambda checks: _unchanged(spec, checks, code, session, say)) if if_changed else None
        found = deploy_checks.preflight(
            spec, registry, provenance, session, files, with_cluster=True, smoke=not skip_smoke, reporter=reporter,
            decide=decide, code=code,
        )  # fmt: skip
        if found.skipped is not None:
            return found.skipped
        attest = _attest(spec, provenance, found.data, key)
        plan = plan_deploy(spec, reason=reason, provenance=provenance, reporter=reporter, checked=found, attest=attest)
        return execute(plan, reporter=reporter, if_changed=if_changed)


def _session(spec: MLJobSpec, registry: str) -> BuildSession:
    """The deploy's registries: one client per registry, silent until the build (the smoke run has the screen)."""
    from vdk.plugin.ml_training.image.build_progress import Progress as Silent
    from vdk.plugin.ml_training.image.build_session import BuildSession

    return BuildSession(spec, registry, Silent())


def _unchanged(spec: MLJobSpec, checks: Any, code: dict[str, str], session: BuildSession, say: Say) -> Unchanged | None:
    """`--if-changed`, once the cluster, the datasets and the dependencies are known: an Unchanged when nothing
    changed since the job's last successful run, else None (the deploy goes on). The base by digest is the one the
    base check read (the session's)."""
    target = checks.result(deploy_checks.CLUSTER_CHECK)
    data = checks.result(deploy_checks.DATA_CHECK) if deploy_checks.DATA_CHECK in checks.names else ()
    layer = checks.result(deploy_checks.DEPENDENCIES_CHECK)
    base = str(session.base().reference)
    state = deploy_changes.current_state(spec, data, layer.packages if layer is not None else (), base, code)
    changes = deploy_changes.changes(target.client, spec, state, with_active=True)
    if changes.repeats is None:
        say(_why_deploying(changes))
        return None
    return _unchanged_result(spec, target.namespace, changes)


def _unchanged_result(spec: MLJobSpec, namespace: str, changes: Changes) -> Unchanged:
    active = changes.same_active
    success = changes.last_success.name if changes.last_success and changes.unchanged_since_success else None
    if active is not None:
        return Unchanged(spec.name, namespace, success, changes, active.name, active.phase)
    return Unchanged(spec.name, namespace, success, changes)


def _why_deploying(changes: Changes) -> str:
    if changes.last_success is None:
        return "--if-changed: the job has no successful run here yet: deploying"
    since = changes.since_success
    assert since is not None
    parts = since.changed_parts or [u.split(":")[0] for u in since.unknown]
    return f"--if-changed: {', '.join(parts)} changed since run {changes.last_success.name}: deploying"


def require_registry(spec: MLJobSpec) -> str:
    """The registry to push the job's image to; an error that says how to set one."""
    if not spec.registry:
        raise MLTrainingError(
            f"no registry to push the image of {spec.name} to",
            f"set {variable('registry')}=registry.example.com/ml (or `registry = ...` in [ml-training] of "
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


def _run_info(spec: MLJobSpec, provenance: audit.Provenance, reason: str | None) -> RunInfo:
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo

    return RunInfo.create(spec, provenance, reason=reason)


def _say_where(spec: MLJobSpec, target: Target, say: Say) -> None:
    from vdk.plugin.ml_training.k8s.backends import describe_choice

    client = target.client
    assert client is not None and target.discovery is not None
    if spec.sweep is not None:
        how = f"backend {target.backend} (a sweep: its trials are an Indexed Job, one pod per trial)"
    else:
        how = describe_choice(target.discovery, spec.backend, target.backend)
    say(f"Cluster: {client.context or 'in-cluster'}, namespace {client.namespace}; {how}")
    say(where_it_runs(spec, target))


def _say_attached(attest: Request | None, say: Say) -> None:
    """What was attached to the image is said as it is pushed; that nothing was, here."""
    if attest is None:
        from vdk.plugin.ml_training.image.attestations import SETTING

        say(f"Attached to the image: nothing ({SETTING} = false)")


def signing_key(spec: MLJobSpec) -> SigningKey | None:
    """The key the image's statements are signed with ($VDK_ML_TRAINING_SIGNING_KEY), None: unsigned (or nothing
    is attached). Read before any work, so that a key that cannot be used stops the deploy at once."""
    return signing.configured_key() if spec.attestations else None


def _attest(spec: MLJobSpec, provenance: audit.Provenance, data: tuple, key: SigningKey | None) -> Request | None:
    """What the build attaches to the image (None: nothing, `ml_training_attestations = false`)."""
    from vdk.plugin.ml_training.image.attestations import Request

    if not spec.attestations:
        return None
    try:
        config_sha256: str | None = hashlib.sha256(spec.config_path.read_bytes()).hexdigest()
    except OSError:
        config_sha256 = None
    parameters = BuildParameters(
        config_sha256, spec.overrides, tuple(pin.to_dict() for pin in data), provenance.deployer
    )
    return Request(parameters, key)
