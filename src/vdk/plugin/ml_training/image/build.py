"""Build a job image on top of its base and push it, through the registry API alone.

Nothing is pulled to local disk but the job's own layers: base layers are cross-repository
mounted when the base lives in the target registry, streamed registry-to-registry otherwise, and
skipped when the target already has them. A code change therefore costs the upload of one small
layer, a config and a manifest, whatever the size of the base. The manifest goes last, so a
failed build leaves no tag behind (only unreferenced blobs, which the registry's GC collects).

Two steps, on one BuildSession (build_session.py: the command's registry clients, the base read once):
`assemble` writes the job's layers and makes the manifest (the image's digest is known then), `push` sends
them; `build_and_push` does both.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait
from dataclasses import dataclass

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.image import attestations
from vdk.plugin.ml_training.image import base_facts_cache
from vdk.plugin.ml_training.image import base_inspection
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image import oci
from vdk.plugin.ml_training.image import torch_warning
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.base_manifest import BaseImage
from vdk.plugin.ml_training.image.build_errors import RegistryError
from vdk.plugin.ml_training.image.build_plan import Inputs
from vdk.plugin.ml_training.image.build_plan import gather
from vdk.plugin.ml_training.image.build_plan import image_env
from vdk.plugin.ml_training.image.build_plan import large_file_warning
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_session import BuildSession
from vdk.plugin.ml_training.image.code_manifest import file_digests
from vdk.plugin.ml_training.image.image_facts import ImageFacts
from vdk.plugin.ml_training.image.image_facts import ImageLayer
from vdk.plugin.ml_training.image.provenance import now
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.image.registry import file_chunks
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import keys
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

PARALLEL_BLOBS = 4


@dataclass(frozen=True)
class PushedLayer:
    name: str  # base, dependencies, runtime, code
    digest: str
    size: int
    action: str  # uploaded, mounted, copied (from the base's registry), present (already there)


@dataclass(frozen=True)
class PushedImage:
    reference: str  # registry/repo@sha256:... — what manifests should run
    digest: str
    tag_reference: str  # registry/repo:tag, the same image by its content tag
    base_reference: str  # the base pinned by digest
    config_digest: str
    layers: tuple[PushedLayer, ...]
    dependencies: tuple[tuple[str, str], ...]  # (name, version) installed in the dependency layer
    python_version: str
    python: str  # the interpreter the image's command starts (found in, or told about, the base)
    attached: tuple[attestations.Attached, ...] = ()  # its SBOM and provenance, as OCI referrers

    @property
    def job_image(self) -> layout.JobImage:
        """The image as manifests run it."""
        return layout.JobImage(self.reference, self.python)

    @property
    def uploaded_bytes(self) -> int:
        return sum(layer.size for layer in self.layers if layer.action in ("uploaded", "copied"))

    def to_dict(self) -> dict:
        return {
            "reference": self.reference,
            "digest": self.digest,
            "tag_reference": self.tag_reference,
            "base_reference": self.base_reference,
            "config_digest": self.config_digest,
            "layers": [layer.__dict__ for layer in self.layers],
            "dependencies": {name: version for name, version in self.dependencies},
            "python_version": self.python_version,
            "python": self.python,
            "attached": [a.to_dict() for a in self.attached],
        }


@dataclass(frozen=True)
class AssembledImage:
    """A job image ready to be pushed or served: its manifest and config, the job's own layers as
    files on local disk, and the base's layers where they are (its registry)."""

    inputs: Inputs
    base: BaseImage
    target: ImageReference  # registry/repo:<content tag>
    manifest: bytes
    config: bytes
    layers: tuple[tuple[str, layer_tarball.LayerBlob, str], ...]  # (name, blob, created_by) of the job's layers
    dependencies: tuple[tuple[str, str], ...]
    deps_layer: dependency_layer.DependencyLayer | None = None  # its cache entry: licences, lock
    code_files: dict[str, str] | None = None  # the code layer's files by hash, when the command hashed them already

    @property
    def media_type(self) -> str:
        return self.base.media_type

    @property
    def digest(self) -> str:
        """The image's digest: the same wherever it is pushed or served."""
        return oci.digest_of(self.manifest)

    @property
    def config_digest(self) -> str:
        """The image ID that container engines give it."""
        return oci.digest_of(self.config)

    @property
    def python(self) -> str:
        return self.inputs.base.python

    @property
    def reference(self) -> str:
        """Where it will be once pushed, pinned by digest: what manifests run."""
        return f"{self.target.registry}/{self.target.repository}@{self.digest}"


def build_and_push(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    progress: Progress | None = None,
    *,
    created: str | None = None,
    refresh_dependencies: bool = False,
    retry: RetryPolicy | None = None,
    attest: attestations.Request | None = None,
) -> PushedImage:
    """Build the job's image (base + dependencies + runtime + code) and push it to `registry`
    (host[/path]) as <registry>/<job name>:<content tag>; returns it pinned by digest. With `attest`, its SBOM and
    build provenance are attached to it (image/attestations.py).

    The same inputs give the same digest. Raises MLTrainingError subclasses (see build_errors.py)."""
    progress = progress or Progress()
    started = now()
    with BuildSession(spec, registry, progress, retry) as session:
        image = assemble(spec, registry, provenance, session, progress, created, refresh_dependencies)
        return push(image, session, progress, attest, provenance, started)


def assemble(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    session: BuildSession,
    progress: Progress,
    created: str | None = None,
    refresh_dependencies: bool = False,
    base_known: Callable[[BaseInfo], object] | None = None,
    files: FileSet | None = None,
    code: dict[str, str] | None = None,
) -> AssembledImage:
    """Everything of the job's image but the base's layers, on local disk in the session's temporary directory
    (the dependency layer in its cache): what a push uploads and what a local container engine is served. The
    base is the session's (read once per command). `base_known(base)` is told what the base has once it is read,
    before anything is built (it may raise to stop there). `files`: the job directory's files as the command
    found them already (source/job_files.py; default: found now), and `code` their hashes (code_manifest.py) when
    it has them too (the attestations name them)."""
    base_ref = spec.base_reference
    progress.stage(f"Base image {base_ref}")
    base = session.base()
    info = base_inspection.know_read_base(spec, session.base_client, base, progress)
    if base_known is not None:
        base_known(info)
    inputs = gather(spec, registry, provenance, info, created, files)
    for f in inputs.code.large_files:
        progress.stage(f"warning: {large_file_warning(f)}")
    for warning in inputs.code.credential_warnings():
        progress.stage(f"warning: {warning}")
    dep_layer = dependency_layer.dependency_layer(spec, inputs.base, progress, refresh_dependencies)
    if dep_layer is not None:  # said before gigabytes go anywhere; in full once per job and dependency set
        entry = dep_layer.blob.path.parent if dep_layer.blob.path is not None else None
        notice = torch_warning.layer_notice(
            dep_layer.packages, dep_layer.sizes, dep_layer.blob.size, spec.base_image, entry, spec.name
        )
        if notice:
            progress.stage(notice)
    runtime_blob = layer_tarball.write_layer(layout.LIB_DIR, inputs.runtime.files, session.tmp)
    code_blob = layer_tarball.write_layer(layout.JOB_DIR, inputs.code.files, session.tmp)
    excluded = f", {len(inputs.code.excluded)} excluded" if inputs.code.excluded else ""
    progress.stage(f"Code: {counted(len(inputs.code.files), 'file')}, {size_text(inputs.code.total_bytes)}{excluded}")
    ours: list[tuple[str, layer_tarball.LayerBlob, str]] = []
    if dep_layer is not None:
        ours.append(
            (
                "dependencies",
                dep_layer.blob,
                f"vdk-ml-training: requirements.txt ({counted(len(dep_layer.packages), 'package')}) in "
                f"{layout.DEPS_DIR}",
            )
        )
    ours.append(("runtime", runtime_blob, f"vdk-ml-training: runtime package in {layout.LIB_DIR}"))
    ours.append(("code", code_blob, f"vdk-ml-training: job {inputs.spec.name} in {layout.JOB_DIR}"))
    new_layers = [oci.NewLayer(b.digest, b.diff_id, b.size, created_by) for _, b, created_by in ours]

    labels = {**inputs.labels, "org.opencontainers.image.base.digest": base.reference.digest or ""}
    env = image_env(
        oci.base_env_value(base.config, "PATH") or oci.DEFAULT_PATH,
        oci.base_env_value(base.config, "PYTHONPATH"),
        dep_layer is not None,
    )
    config = oci.image_config(
        base.config, new_layers, env, layout.JOB_DIR, list(inputs.command), labels, inputs.created
    )
    return AssembledImage(
        inputs=inputs,
        base=base,
        target=inputs.target(code_blob.diff_id, runtime_blob.diff_id),  # what the dry run names
        manifest=oci.manifest(base.media_type, config, base.layers, new_layers),
        config=config,
        layers=tuple(ours),
        dependencies=dep_layer.packages if dep_layer else (),
        deps_layer=dep_layer,
        code_files=code,
    )


def image_facts(
    image: AssembledImage, pushed: PushedImage, provenance: audit.Provenance, started: str, finished: str
) -> ImageFacts:
    """What the pushed image says of itself (its SBOM's and provenance's facts)."""
    spec, info, target = image.inputs.spec, image.inputs.base, image.target
    layer_type = oci.LAYER_TYPE[image.media_type]
    layers = [ImageLayer("base", d["digest"], int(d.get("size", 0)), d.get("mediaType", "")) for d in image.base.layers]
    layers += [ImageLayer(name, blob.digest, blob.size, layer_type) for name, blob, _ in image.layers]
    read = base_facts_cache.cached(image.base.reference.digest)
    deps = image.deps_layer
    return ImageFacts(
        registry=target.registry,
        repository=target.repository,
        digest=pushed.digest,
        media_type=image.media_type,
        size=len(image.manifest),
        tag=target.tag,
        created=image.inputs.created,
        job=spec.name,
        team=spec.team,
        base_image=spec.base_image,
        base_reference=str(image.base.reference),
        base_written=spec.base_reference,
        base_pinned=image.base.reference,
        python=info.python,
        python_version=info.python_version,
        wheel_platform=info.wheel_platform,
        layers=tuple(layers),
        packages=image.dependencies,
        licenses=dict(deps.licenses) if deps else {},
        lock=deps.lock if deps else Lock("", {}),
        base_packages=read.distributions if read else (),
        base_packages_read=read is not None,
        code_files=image.code_files if image.code_files is not None else file_digests(image.inputs.code.files),
        git_commit=provenance.git_commit,
        git_dirty=provenance.git_dirty,
        git_diff_sha256=provenance.git_diff_sha256,
        git_remote=provenance.git_remote,
        started=started,
        finished=finished,
    )


def push(
    image: AssembledImage,
    session: BuildSession,
    progress: Progress,
    attest: attestations.Request | None = None,
    provenance: audit.Provenance | None = None,
    started: str | None = None,
) -> PushedImage:
    """Push an assembled image through the session's clients (its target's): the base's layers mounted, copied or
    found there, the job's uploaded unless present, the manifest last. Returns it pinned by digest. With `attest`,
    its SBOM and build provenance (of `provenance`, the build `started` then) are attached to it."""
    pushed = _push(image, session, progress)
    if attest is None:
        return pushed
    assert provenance is not None, "the provenance of an image is its source's"
    facts = image_facts(image, pushed, provenance, started or now(), now())
    assert session.target is not None
    try:
        attached = attestations.attach_all(session.target, facts, attest, progress.stage)
    except RegistryError as e:
        raise RegistryError(
            f"{pushed.reference} was pushed, but its SBOM and provenance could not be attached: {e.problem}",
            f"{e.fix}; for a registry that refuses OCI artifacts, set {attestations.SETTING} = false "
            f"({keys.variable('attestations')}=false)",
        ) from None
    progress.stage(attestations.describe_attached(attached))
    return dataclasses.replace(pushed, attached=attached)


def _push(image: AssembledImage, session: BuildSession, progress: Progress) -> PushedImage:
    pusher, puller, same_registry = session.target, session.base_client, session.same_registry
    assert pusher is not None, "a session without a target registry pushes nothing"
    target, base, config = image.target, image.base, image.config
    repo = target.repository
    progress.stage(f"Pushing to {target.registry}/{repo}")
    total = sum(int(d.get("size", 0)) for d in base.layers) + sum(blob.size for _, blob, _ in image.layers)
    pusher.start_deadline(pusher.retry.push_seconds(total))  # no request starts after it: a clear end
    # Blobs move in parallel (a base has several large layers); the manifest waits for all of them.
    tasks: list[Callable[[], PushedLayer]] = [
        functools.partial(_push_base_layer, d, base, pusher, puller, repo, same_registry) for d in base.layers
    ]
    tasks += [functools.partial(_push_file, name, blob, pusher, repo) for name, blob, _ in image.layers]
    pushed = _in_parallel(tasks, (pusher, puller))
    if not pusher.blob_exists(repo, image.config_digest):
        pusher.upload(repo, image.config_digest, len(config), lambda: [config], "image config")
    digest = pusher.put_manifest(repo, target.tag or "latest", image.manifest, image.media_type)
    moved = sum(layer.size for layer in pushed if layer.action in ("uploaded", "copied"))
    reused = sum(1 for layer in pushed if layer.action in ("present", "mounted"))
    progress.stage(
        f"Pushed {target.registry}/{repo}@{digest} ({size_text(moved)} sent, {counted(reused, 'layer')} reused)"
    )
    return PushedImage(
        reference=f"{target.registry}/{repo}@{digest}",
        digest=digest,
        tag_reference=str(target),
        base_reference=str(base.reference),
        config_digest=image.config_digest,
        layers=tuple(pushed),
        dependencies=image.dependencies,
        python_version=image.inputs.base.python_version,
        python=image.python,
    )


def _in_parallel(tasks: list[Callable[[], PushedLayer]], clients: tuple[RegistryClient, ...]) -> list[PushedLayer]:
    """The tasks' results, PARALLEL_BLOBS at a time. The first failure — or a signal (Ctrl-C, SIGTERM) in the
    main thread, which waits here — ends the push at once: the clients start no request and retry none, and the
    others' uploads are not waited for (each ends with its current request)."""
    pool = ThreadPoolExecutor(max_workers=PARALLEL_BLOBS)
    try:
        futures = [pool.submit(task) for task in tasks]
        wait(futures, return_when=FIRST_EXCEPTION)  # a signal interrupts the wait itself
        failed = next((f.exception() for f in futures if f.done() and f.exception() is not None), None)
        if failed is not None:
            raise failed
        done = [future.result() for future in futures]
    except BaseException:
        for client in clients:
            client.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return done


def _push_base_layer(
    descriptor: dict, base: BaseImage, pusher: RegistryClient, puller: RegistryClient, repo: str, same_registry: bool
) -> PushedLayer:
    digest, size = descriptor["digest"], int(descriptor.get("size", 0))
    if pusher.blob_exists(repo, digest):
        return PushedLayer("base", digest, size, "present")
    if same_registry and pusher.mount(repo, digest, base.reference.repository):
        return PushedLayer("base", digest, size, "mounted")
    # Another registry: stream it across, never touching the local disk.
    pusher.upload(
        repo, digest, size, lambda: puller.open_blob(base.reference.repository, digest), f"base layer {digest[7:19]}"
    )
    return PushedLayer("base", digest, size, "copied")


def _push_file(name: str, blob: layer_tarball.LayerBlob, pusher: RegistryClient, repo: str) -> PushedLayer:
    if pusher.blob_exists(repo, blob.digest):
        return PushedLayer(name, blob.digest, blob.size, "present")
    assert blob.path is not None
    path = blob.path
    pusher.upload(repo, blob.digest, blob.size, lambda: file_chunks(path), f"{name} layer")
    return PushedLayer(name, blob.digest, blob.size, "uploaded")
