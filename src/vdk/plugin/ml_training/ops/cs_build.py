"""The builder of the VDK Control Service's ml-training entry: what runs in its `builder-<job>` Kubernetes Job when a
deploy of an ml-training job goes through the service. It follows the service's builder contract (that of its own
job-builder images): eleven positional arguments, in the service's order (the registry's address and credentials,
its git repository's and credentials), and variables (the job, the version, the base image); the job's files from
the service's git repository at that version; the image pushed as `${IMAGE_REGISTRY_PATH}/${DATA_JOB_NAME}:
${GIT_COMMIT}`, the tag the service's CronJob runs. It is this plugin's daemonless build (ops/deploy.py's `build`:
no Docker daemon, no kaniko), with the image's SBOM and build provenance attached; the job's own commit and dirty
flag come from the file the deploy uploaded with it (source/audit.py's UPLOADED_PROVENANCE).

How the service judges a builder (its DeploymentNotificationHelper): the builder's log containing
`>data-job-not-found<` is the user's error, so is `>requirements_failed<` (three times at least: the message
between the last two is what the service reports); anything else that fails is the platform's. So a problem of
the job (its config.ini, its requirements, its imports) is written between those markers.

The image's working directory holds the job's code; the service starts `vdk run ./<job>` there, so the builder
adds `<job>/config.ini` to it, which names it an ml-training job: the launcher (ops/cs_launch.py) then reads the
job from the code layer itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from vdk.plugin.ml_training.dependencies.install_errors import DependencyError
from vdk.plugin.ml_training.dependencies.install_errors import DiskFullError
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import keys
from vdk.plugin.ml_training.job.config_file import CONFIG_FILE
from vdk.plugin.ml_training.job.config_file import JOB_TYPE
from vdk.plugin.ml_training.job.config_file import is_ml_job
from vdk.plugin.ml_training.ops.imports import ImportCheckFailed
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import Say
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.source import audit

# The service's markers in a builder's log.
REQUIREMENTS_FAILED = ">requirements_failed<"
JOB_NOT_FOUND = ">data-job-not-found<"
# The positional arguments, in the order the service passes them (JobImageBuilder.buildImage).
ARGUMENTS = (
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_region",
    "docker_registry",
    "git_username",
    "git_password",
    "git_repository",
    "registry_type",
    "registry_username",
    "registry_password",
    "aws_session_token",
)
GENERIC_REGISTRY = "generic"
_GIT_TIMEOUT = 900
# The config.ini the builder adds as `<job>/config.ini` in the image's job directory.
_STUB = """; Written by vdk-ml-training's builder for the VDK Control Service, whose data-job pod runs `vdk run ./{job}`
; in the image's working directory: the launcher reads the job in the directory above.
[job]
type = {job_type}
"""


@dataclass(frozen=True)
class BuildRequest:
    """What the service asks for: the arguments by name, and its variables."""

    arguments: dict[str, str]
    job: str  # DATA_JOB_NAME (JOB_NAME)
    version: str  # GIT_COMMIT: the commit of the service's git repository that holds the job's files
    branch: str  # GIT_BRANCH
    registry: str  # IMAGE_REGISTRY_PATH
    base_image: str | None  # BASE_IMAGE: the entry's base, for jobs that name none
    git_ssl: bool  # GIT_SSL_ENABLED

    @property
    def tag(self) -> str:
        """The reference the service's CronJob runs."""
        return f"{self.registry}/{self.job}:{self.version}"

    def clone_url(self) -> str:
        user, password = self.arguments["git_username"], self.arguments["git_password"]
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}@" if user or password else ""
        return f"{'https' if self.git_ssl else 'http'}://{credentials}{self.arguments['git_repository']}"


class UserError(MLTrainingError):
    """A problem of the job itself: the service reports it to the job's owners as theirs."""


def request_from(argv: list[str], environ: dict[str, str]) -> BuildRequest:
    """The request in the service's form: eleven positional arguments and its variables."""
    if len(argv) != len(ARGUMENTS):
        raise MLTrainingError(
            f"the builder takes the VDK Control Service's {len(ARGUMENTS)} arguments ({', '.join(ARGUMENTS)}), "
            f"got {len(argv)}",
            "run it as the Control Service runs its builders (the builderImage of its ml-training entry)",
        )
    job = environ.get("DATA_JOB_NAME") or environ.get("JOB_NAME") or ""
    missing = [name for name, value in (("DATA_JOB_NAME", job), ("GIT_COMMIT", environ.get("GIT_COMMIT"))) if not value]
    registry = environ.get("IMAGE_REGISTRY_PATH") or argv[ARGUMENTS.index("docker_registry")]
    if not registry:
        missing.append("IMAGE_REGISTRY_PATH")
    if missing:
        raise MLTrainingError(
            f"the builder's environment lacks {', '.join(missing)}",
            "run it as the Control Service runs its builders: it sets them",
        )
    return BuildRequest(
        arguments=dict(zip(ARGUMENTS, argv, strict=True)),
        job=job,
        version=environ["GIT_COMMIT"],
        branch=environ.get("GIT_BRANCH") or "master",
        registry=registry.rstrip("/"),
        base_image=environ.get("BASE_IMAGE") or None,
        git_ssl=environ.get("GIT_SSL_ENABLED", "true").strip().lower() != "false",
    )


@checked
def build_as_builder(argv: list[str], environ: dict[str, str], reporter: Reporter | None = None) -> bool:
    """The builder's whole run, as the service starts it (`argv`: its eleven arguments; `environ`: its
    variables): whether the image was pushed and tagged. Everything it says is a note of `reporter` (the log the
    service reads): a problem with its fix, a problem of the job between the >requirements_failed< markers too."""
    reporter = or_quiet(reporter)
    say = reporter.note
    try:
        request = request_from(argv, environ)
        with temporary_workdir() as workdir:
            build_for_service(request, Path(workdir), reporter)
    except UserError as e:
        _say_error(e, say)
        say(requirements_failed(e.message))
        return False
    except MLTrainingError as e:
        _say_error(e, say)
        return False
    return True


def _say_error(error: MLTrainingError, say: Say) -> None:
    say(f"error: {error.problem}")
    if error.fix:
        say(f"Fix: {error.fix}")


@checked
def build_for_service(request: BuildRequest, workdir: Path, reporter: Reporter | None = None) -> str:
    """Fetch the job at the requested version, build and push its image, tag it as the service expects; returns
    that reference. Raises UserError for a problem of the job, MLTrainingError for anything else; a job the
    service's repository does not hold is said with JOB_NOT_FOUND."""
    reporter = or_quiet(reporter)
    say, progress = reporter.note, reporter.progress
    registry_type = request.arguments["registry_type"] or GENERIC_REGISTRY
    if registry_type != GENERIC_REGISTRY:
        raise MLTrainingError(
            f"the registry type {registry_type!r} is not one the vdk-ml-training builder pushes to",
            "give the Control Service a generic registry (an OCI registry with user and password)",
        )
    job_dir = fetch_job(request, workdir, say)
    _authenticate(request, workdir)
    spec = _spec(request, job_dir)
    provenance = audit.read_uploaded(job_dir) or audit.collect(job_dir)
    say(f"Building {request.tag} from the job's commit {provenance.git_commit or '(not in git)'}"
        + (" (with changes not committed)" if provenance.git_dirty else ""))  # fmt: skip
    _check_job(spec, progress)
    from vdk.plugin.ml_training.ops.deploy import build

    pushed = build(spec, skip_smoke=True, provenance=provenance, reporter=reporter)
    _tag(request, pushed.digest)
    say(f"Pushed {pushed.reference}, tagged {request.tag}")
    return request.tag


def fetch_job(request: BuildRequest, workdir: Path, say: Say) -> Path:
    """The job's directory in a clone of the service's repository at the requested version, with the
    `<job>/config.ini` the service's `vdk run ./<job>` needs; JOB_NOT_FOUND said when it is not there."""
    clone = workdir / "data-jobs"
    public = f"{'https' if request.git_ssl else 'http'}://{request.arguments['git_repository']}"
    say(f"Fetching {request.job} at {request.version} from {public}")
    _git(["clone", "--quiet", "--branch", request.branch, request.clone_url(), str(clone)], public)
    _git(["-C", str(clone), "reset", "--quiet", "--hard", request.version], public)
    job_dir = clone / request.job
    if not (job_dir / CONFIG_FILE).is_file():
        say(JOB_NOT_FOUND)
        raise UserError(
            f"the Control Service's repository has no job {request.job} at {request.version}",
            "deploy the job again (`vdk deploy -p JOB`): its upload puts it there",
        )
    if not is_ml_job(job_dir):
        raise UserError(
            f"{request.job} is not an ml-training job, but was deployed with the ml-training entry",
            f"deploy data jobs with another python_version; an ml-training job has `[job] type = {JOB_TYPE}`",
        )
    stub = job_dir / request.job
    if stub.exists():
        raise UserError(
            f"{request.job} has a file or directory named {request.job}: the image needs that name for the "
            "Control Service's `vdk run`",
            "rename it",
        )
    stub.mkdir()
    (stub / CONFIG_FILE).write_text(_STUB.format(job=request.job, job_type=JOB_TYPE), encoding="utf-8")
    return job_dir


def _git(args: list[str], public: str) -> None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=_GIT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MLTrainingError(f"git could not fetch {public}: {e}", "check that git is in the builder image") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[-400:]
        raise MLTrainingError(
            f"git could not fetch the job from {public}: {why}",
            "check the Control Service's git settings (URL, user, password, GIT_SSL_ENABLED)",
        )


def _authenticate(request: BuildRequest, workdir: Path) -> None:
    """The registry credentials the service hands every builder, where the image builder looks first."""
    from vdk.plugin.ml_training.image.reference import split_registry

    user, password = request.arguments["registry_username"], request.arguments["registry_password"]
    if not user and not password:
        return
    host, _ = split_registry(request.registry)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    path = workdir / "auth.json"
    path.write_text(json.dumps({"auths": {host: {"auth": token}}}), encoding="utf-8")
    path.chmod(0o600)
    os.environ["REGISTRY_AUTH_FILE"] = str(path)


def _spec(request: BuildRequest, job_dir: Path):
    """The job's spec, pushed to the service's registry, on the entry's base unless the job names its own."""
    from vdk.plugin.ml_training.ops.deploy import deploy_spec

    values = {
        keys.key("registry").setting_name: request.registry,
        keys.key("base_image").setting_name: request.base_image,
    }
    try:
        spec = deploy_spec(job_dir, name=request.job, configuration=_Settings(values))
    except JobConfigError as e:
        raise UserError(e.problem, e.fix) from None
    if spec.registry != request.registry:
        import dataclasses

        spec = dataclasses.replace(spec, registry=request.registry)  # where the service's CronJob pulls from
    return spec


def _check_job(spec, progress) -> None:
    """What of the job can fail the build, checked first so that it is reported as the user's: the base's imports,
    the requirements resolved and installed (the build reuses that layer)."""
    from vdk.plugin.ml_training.image.base_inspection import know_base
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.dependency_layer import dependency_layer
    from vdk.plugin.ml_training.ops.deploy_checks import check_imports

    progress = progress or Progress()
    base = know_base(spec, progress)
    try:
        check_imports(spec, base)
        dependency_layer(spec, base, progress)
    except DiskFullError:
        raise
    except (ImportCheckFailed, DependencyError, JobConfigError) as e:
        raise UserError(e.problem, e.fix) from None


def _tag(request: BuildRequest, digest: str) -> None:
    """The pushed image tagged `${GIT_COMMIT}` too (the manifest put again under that tag)."""
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.image.reference import split_registry
    from vdk.plugin.ml_training.image.registry import TARGET
    from vdk.plugin.ml_training.image.registry import RegistryClient

    host, prefix = split_registry(request.registry)
    repository = f"{prefix}/{request.job}" if prefix else request.job
    with RegistryClient(host, Progress(), role=TARGET) as client:
        manifest, media_type = client.get_manifest(repository, digest)
        client.put_manifest(repository, request.version, manifest, media_type)


def requirements_failed(message: str) -> str:
    """The lines that make the service report `message` as the user's error (its marker three times: it splits
    the log on it and reports the part before the last)."""
    text = " ".join(message.replace(REQUIREMENTS_FAILED, "").split())
    return f"{REQUIREMENTS_FAILED}\n{REQUIREMENTS_FAILED}{text}{REQUIREMENTS_FAILED}"


class _Settings:
    """VDK settings for deploy_spec: the request's registry and base image (the job's config.ini wins for the
    base; the registry is the service's)."""

    def __init__(self, values: dict[str, str | None]):
        self.values = values

    def get_value(self, key: str):
        return self.values.get(key)


def temporary_workdir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="vdk-ml-builder-")
