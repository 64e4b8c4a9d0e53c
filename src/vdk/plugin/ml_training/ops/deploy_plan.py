"""What a deploy starts, the same for `vdk deploy` and its dry run: where the run goes (a Target: namespace,
backend, and the connected cluster when one was asked), the run's identity, and its manifests rendered for the
job's image. The dry run prints a DeployPlan; a deploy executes one (ops/deploy.py): the plan its pre-flight
checks made, with the image assembled (its digest known, not pushed yet) and what the run changes since the job's
last run. Executing it pushes that image and creates those manifests, nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import ClassVar
from typing import Literal

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import AUTO_BACKEND
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.source import audit

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image import ImagePlan
    from vdk.plugin.ml_training.image import PushedImage
    from vdk.plugin.ml_training.image.attestations import Request
    from vdk.plugin.ml_training.image.build import AssembledImage
    from vdk.plugin.ml_training.image.build_session import BuildSession
    from vdk.plugin.ml_training.k8s.backends import Discovery
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
    from vdk.plugin.ml_training.ops.deploy_changes import Changes

# What a dry run shows for `backend = auto`: it cannot ask the cluster, and this one runs anywhere.
DRY_RUN_AUTO_BACKEND = "job"


@dataclass(frozen=True)
class Target:
    """Where a run goes: its namespace (and where that came from), its backend, and for a deploy the connected
    cluster and what it serves (a dry run asks no cluster: both None)."""

    namespace: str
    namespace_origin: str  # when the job's keys do not say: "the namespace of kube context lab", ...
    backend: str
    client: KubeClient | None = None
    discovery: Discovery | None = None


@dataclass(frozen=True)
class PlannedBuild:
    """A deploy's image, assembled on this machine (its layers written, its manifest made: its digest is known) and
    the session (the deploy's registry clients) that pushes it when the plan is executed."""

    image: AssembledImage
    session: BuildSession
    attest: Request | None = None  # what is attached to the image when it is pushed (its SBOM and provenance)
    started: str | None = None  # when its build started (the provenance says it)


@dataclass(frozen=True)
class DeployPlan:
    """A run ready to be created: the manifests, in the order to create them, for `image` in `target`. A dry run's
    names the image a build would push (`image_plan`); a deploy's (`build`) the image assembled, by digest, and
    says what the run changes since the job's last (`changes`)."""

    spec: MLJobSpec
    target: Target
    image: JobImage
    run: RunInfo
    manifests: list[dict]
    image_plan: ImagePlan | None = None  # a dry run's: what the build would push
    build: PlannedBuild | None = None  # a deploy's: what executing the plan pushes
    changes: Changes | None = None  # a deploy's: this run against the job's last run and last successful one

    def to_yaml(self) -> str:
        """Multi-document YAML, as `kubectl apply -f -` reads it."""
        from vdk.plugin.ml_training.k8s.manifests import to_yaml

        return to_yaml(self.manifests)


@dataclass(frozen=True)
class DeployResult:
    """A run started: its plan as applied, the image it runs (pushed, pinned by digest), what was created, and
    what changed since the job's last run (ops/deploy_changes.py)."""

    plan: DeployPlan
    image: PushedImage
    created: list[str]  # Kind/name, in the order created
    provenance: audit.Provenance
    changes: Changes | None = None

    started: ClassVar[Literal[True]] = True  # tells it from Unchanged (mypy narrows on it)

    def to_dict(self) -> dict:
        spec, target, provenance = self.plan.spec, self.plan.target, self.provenance
        return {
            "job_name": spec.name,
            "job_team": spec.team,
            "run": self.plan.run.name,
            "backend": target.backend,
            # a sweep: its trials and how many run at a time (its backend is the trials' Indexed Job's)
            "sweep": {"trials": spec.sweep.trials, "parallel": spec.sweep.parallel} if spec.sweep else None,
            "namespace": target.namespace,
            "context": target.client.context if target.client is not None else None,
            "image": self.image.reference,
            "created": list(self.created),
            "git_commit": provenance.git_commit,
            "git_dirty": provenance.git_dirty if provenance.git_commit else None,  # None: not in git
            "dependencies": dict(self.image.dependencies),
            "data": [dict(pin.to_dict(), objects=None) for pin in self.plan.run.data],  # files: in the record
            "changes": self.changes.to_dict() if self.changes is not None else None,
            "attached": [a.to_dict() for a in self.image.attached],  # its SBOM and provenance (OCI referrers)
            "started": True,
        }


@dataclass(frozen=True)
class Unchanged:
    """`vdk deploy --if-changed` that started nothing: nothing changed since the job's last successful run, or a run
    that has not ended yet (pending, queued, running: `active`) is the same."""

    job_name: str
    namespace: str
    last_success: str | None  # the last successful run it compared with (None: there is none, `active` repeats)
    changes: Changes
    active: str | None = None  # a run not ended yet that is the same (another deploy's, a moment ago, say)
    active_phase: str | None = None

    started: ClassVar[Literal[False]] = False

    @property
    def repeats(self) -> str:
        """The run this deploy would have repeated."""
        return self.active or self.last_success or "?"

    @property
    def reason(self) -> str:
        if self.active:
            return f"run {self.active} ({self.active_phase}) is the same and has not ended yet"
        return f"nothing changed since run {self.last_success}"

    def to_dict(self) -> dict:
        return {
            "job_name": self.job_name,
            "namespace": self.namespace,
            "started": False,
            "reason": self.reason,
            "last_successful_run": self.last_success,
            "active_run": self.active,
            "changes": self.changes.to_dict(),
        }


def plan_run(
    spec: MLJobSpec,
    target: Target,
    image: JobImage,
    run: RunInfo,
    say: Say,
    image_plan: ImagePlan | None = None,
    build: PlannedBuild | None = None,
    changes: Changes | None = None,
) -> DeployPlan:
    """The run's manifests, for a deploy and a dry run alike; what the backend cannot honour goes to `say`."""
    from vdk.plugin.ml_training.k8s.manifests import limitations
    from vdk.plugin.ml_training.k8s.manifests import render_run

    for note in limitations(spec, target.backend, target.discovery):
        say(f"note: {note}")
    manifests = render_run(spec, image, run, target.namespace, target.backend, target.discovery)
    return DeployPlan(spec, target, image, run, manifests, image_plan, build, changes)


def offline_target(spec: MLJobSpec, say: Say) -> Target:
    """Where a dry run says the run goes, asking no cluster: the job's namespace, else the kube context's as the
    kubeconfig file says, else "default"; `backend = auto` shows as DRY_RUN_AUTO_BACKEND (with a note)."""
    backend = spec.backend
    if spec.sweep is not None:  # its trials are an Indexed Job whatever the job's backend
        from vdk.plugin.ml_training.k8s.sweep_manifests import BACKEND as backend
    elif backend == AUTO_BACKEND:
        backend = DRY_RUN_AUTO_BACKEND
        say(
            f"note: backend = auto is decided by what the cluster serves; a dry run asks no cluster, so it shows "
            f"`{backend}` (see the others with --backend pytorchjob|trainjob)"
        )
    local = None if spec.namespace else _local_namespace(spec)
    namespace = spec.namespace or local or "default"
    kube = "the kube context's namespace" if local else "no namespace is set and no kube context has one"
    return Target(namespace, kube, backend)


def _local_namespace(spec: MLJobSpec) -> str | None:
    """The kube context's namespace as the kubeconfig file says (a local read, no connection)."""
    from vdk.plugin.ml_training.k8s.client import KubeClient

    try:
        return KubeClient(spec.kube_context, None).namespace
    except MLTrainingError:
        return None


def where_it_runs(spec: MLJobSpec, target: Target) -> str:
    """Team, namespace and queue of the run and where each came from, and where its pods go (a deploy and a dry
    run say it)."""
    from vdk.plugin.ml_training.k8s.placement import describe

    team = f"{spec.team}  ({spec.origin('team')})" if spec.team else "none (no -t, [owner] team or default team)"
    lines = ["Where it runs:", f"  team       {team}"]
    lines.append(f"  namespace  {target.namespace}  ({spec.origin('namespace') or target.namespace_origin})")
    if spec.sweep is not None:
        lines.append(f"  {spec.sweep_text()}")
    if spec.queue:
        lines.append(f"  queue      {spec.queue}  ({spec.origin('queue')})")
    lines += [f"  {line}" for line in describe(spec)]
    return "\n".join(lines)
