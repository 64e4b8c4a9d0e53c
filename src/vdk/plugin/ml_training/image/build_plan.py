"""What a job image will hold, worked out without building anything: the dry run.

`plan_image` scans the job directory, the plugin's runtime package and requirements.txt, and
derives the reference the build would push (`registry/<job>:<tag>`, the tag a hash of every
input, so a plan and the build that follows name the same tag). It contacts nothing, except the
registry of a base image that neither the table of well-known bases nor `[ml-training]` describes:
that base is read (once per digest, see base_inspection.py). `ImagePlan.render()` is the report for stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone
from pathlib import Path

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.image import base_inspection
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image import layer_inputs
from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image import torch_warning
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.reference import split_registry
from vdk.plugin.ml_training.image.registry_timing import RetryPolicy
from vdk.plugin.ml_training.image.runtime_layer import scan_runtime_package
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import LARGE_FILE_BYTES
from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.source.job_files import SourceFile
from vdk.plugin.ml_training.source.job_files import scan_job_dir
from vdk.plugin.ml_training.source.requirements import RequirementsFile
from vdk.plugin.ml_training.source.requirements import requirement_name
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

FIXED_CREATED = "1970-01-01T00:00:01Z"  # matches the files' mtime; see `created_timestamp`
_FORMAT = "image-v1"  # part of every tag: bump when the image layout changes
LABEL_PREFIX = "io.vdk.ml-training"
BOOTSTRAP_FILE = layout.BOOTSTRAP_MODULE.replace(".", "/") + ".py"  # what every image's command runs


def created_timestamp(created: str | None = None) -> str:
    """The image's creation time: `created` if given, else $SOURCE_DATE_EPOCH, else a fixed date,
    so that the same inputs give the same digest (reproducible-builds.org convention)."""
    if created:
        return created
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return FIXED_CREATED


def image_labels(spec: MLJobSpec, provenance: audit.Provenance, created: str, python_version: str) -> dict[str, str]:
    """OCI labels: where the code came from and which job/spec it is. Nothing user- or time-specific
    (unless `created` is), so that two people building the same commit get the same digest."""
    labels = {
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.base.name": spec.base_image,
        f"{LABEL_PREFIX}.job": spec.name,
        f"{LABEL_PREFIX}.spec-sha256": spec.fingerprint(),
        f"{LABEL_PREFIX}.python": python_version,  # what the dependency layer was built for
    }
    if provenance.git_commit:
        labels["org.opencontainers.image.revision"] = provenance.git_commit
    if provenance.git_remote:  # without credentials (audit.collect strips them)
        labels["org.opencontainers.image.source"] = provenance.git_remote
    if spec.team:
        labels[f"{LABEL_PREFIX}.team"] = spec.team
    if provenance.git_dirty:
        labels[f"{LABEL_PREFIX}.git-dirty"] = "true"
        if provenance.git_diff_sha256:
            labels[f"{LABEL_PREFIX}.git-diff-sha256"] = provenance.git_diff_sha256
    return labels


def image_env(base_path: str | None, base_pythonpath: str | None, with_deps: bool) -> dict[str, str]:
    """What the job's layers add to the base's environment."""
    env = {
        "PYTHONPATH": layout.PYTHONPATH + (f":{base_pythonpath}" if base_pythonpath else ""),
        "PYTHONUNBUFFERED": "1",
    }
    if with_deps:
        env["PATH"] = f"{layout.DEPS_DIR}/bin:{base_path or ''}".rstrip(":")
    return env


@dataclass(frozen=True)
class LayerPlan:
    name: str  # dependencies, runtime, code
    directory: str  # where it lands in the image
    files: int | None  # None: known only after installing
    bytes: int | None
    detail: str = ""


@dataclass(frozen=True)
class ImagePlan:
    job: str
    reference: str  # registry/repo:tag that a build would push (the digest comes with the build)
    base_image: str
    base: BaseInfo
    layers: tuple[LayerPlan, ...]
    requirements: tuple[str, ...]
    excluded: tuple  # sources.Excluded of the job directory
    large_files: tuple  # sources.SourceFile over LARGE_FILE_BYTES
    working_dir: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # added to the base's environment
    labels: dict[str, str] = field(default_factory=dict)
    dependency_warning: str | None = None  # torch or CUDA wheels the dependency layer would carry
    credential_warnings: tuple[str, ...] = ()  # files that hold a credential: left out, or shipped as asked

    def warnings(self) -> list[str]:
        large = [large_file_warning(f) for f in self.large_files]
        return large + list(self.credential_warnings) + [w for w in [self.dependency_warning] if w]

    def render(self, max_excluded: int = 25) -> str:
        """The plan as text for a person (stderr)."""
        lines = [
            f"Image for job {self.job}",
            f"  reference  {self.reference}  (the digest is known once built)",
            f"  base       {self.base_image}",
            f"             {self.base.describe()}",
            f"  python     {self.base.python}: {self.base.python_reason}",
            "  layers on top of the base:",
        ]
        for layer in self.layers:
            size = "" if layer.files is None else f"{counted(layer.files, 'file')}, {size_text(layer.bytes or 0)}"
            text = "; ".join(t for t in (size, layer.detail) if t)
            lines.append(f"    {layer.name:<13}{layer.directory:<19}{text}")
        if self.excluded:
            lines.append(f"  excluded from the code layer ({len(self.excluded)}):")
            for item in self.excluded[:max_excluded]:
                lines.append(f"    {item.path}  ({item.reason})")
            if len(self.excluded) > max_excluded:
                lines.append(f"    ... and {len(self.excluded) - max_excluded} more")
        for warning in self.warnings():
            lines.append(f"  warning: {warning}")
        lines += [
            f"  workdir    {self.working_dir}",
            f"  command    {shlex.join(self.command)}",
            "  env        " + "  ".join(f"{k}={v}" for k, v in self.env.items()) + "  (+ the base's)",
        ]
        lines += [f"  label      {k}={v}" for k, v in sorted(self.labels.items())]
        return "\n".join(lines)


def large_file_warning(f: SourceFile) -> str:
    """What the dry run and the build say about a file over LARGE_FILE_BYTES."""
    return (
        f"{f.path} is {size_text(f.size)}: files over {size_text(LARGE_FILE_BYTES)} make every deploy slower; "
        "put data in object storage (or list it in .vdkignore)"
    )


@dataclass(frozen=True)
class Inputs:
    """Everything an image is made of, gathered without contacting anything."""

    spec: MLJobSpec
    host: str  # the registry the image is pushed to
    repository: str
    base_ref: ImageReference
    base: BaseInfo
    code: FileSet
    runtime: FileSet
    requirements: Path | None
    labels: dict[str, str]
    created: str
    command: tuple[str, ...]

    def target(self, code_diff_id: str, runtime_diff_id: str) -> ImageReference:
        """registry/repo:<tag>, the tag a hash of every input, the code and runtime layers by their
        diff_ids: the dry run computes them, the build takes them from the layers it writes."""
        data = {
            "format": _FORMAT,
            "code": code_diff_id,
            "runtime": runtime_diff_id,
            "requirements": hashlib.sha256(wanted).hexdigest()
            if (wanted := layer_inputs.layer_input(self.spec))
            else None,
            "base_image": self.spec.base_image,
            "base": [
                self.base.python,
                self.base.python_version,
                self.base.wheel_platform,
                sorted(self.base.provides),
                sorted(self.base.pins),
            ],
            "labels": self.labels,
            "command": list(self.command),
            "created": self.created,
        }
        tag = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]
        return ImageReference(self.host, self.repository, tag)


def target_repository(registry: str, spec: MLJobSpec) -> tuple[str, str]:
    """(registry host, repository) that a job's image is pushed to: <registry path>/<job name>."""
    host, prefix = split_registry(registry)
    name = spec.kubernetes_name()
    return host, f"{prefix}/{name}" if prefix else name


def gather(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    base: BaseInfo,
    created: str | None = None,
    code: FileSet | None = None,
) -> Inputs:
    """Everything the image is made of, for a base that is already known (`base`). `code`: the job directory's files
    as the command found them already (default: found now)."""
    host, repository = target_repository(registry, spec)
    base_ref = spec.base_reference
    code = code if code is not None else scan_job_dir(spec.job_dir)
    runtime = scan_runtime_package()
    if not any(f.path == BOOTSTRAP_FILE for f in runtime.files):
        raise ImageBuildError(
            f"the plugin's runtime package is incomplete: {runtime.root / 'runtime' / 'bootstrap.py'} is missing, "
            "and every job image starts through it",
            "reinstall vdk-ml-training (`pip install --force-reinstall vdk-ml-training`)",
        )
    requirements = layer_inputs.requirements_file(spec)
    created = created_timestamp(created)
    labels = image_labels(spec, provenance, created, base.python_version)
    command = tuple(layout.launch_command(spec, base.python))
    return Inputs(spec, host, repository, base_ref, base, code, runtime, requirements, labels, created, command)


def plan_image(
    spec: MLJobSpec,
    registry: str,
    provenance: audit.Provenance,
    created: str | None = None,
    progress: Progress | None = None,
    retry: RetryPolicy | None = None,
) -> ImagePlan:
    """What building the job's image would produce. Reads local files, and the base image only when
    neither the table nor [ml-training] describes it; never a package index."""
    base = base_inspection.know_base(spec, progress or Progress(), retry)
    inputs = gather(spec, registry, provenance, base, created)
    target = inputs.target(
        layer_tarball.diff_id(layout.JOB_DIR, inputs.code.files),
        layer_tarball.diff_id(layout.LIB_DIR, inputs.runtime.files),
    )
    layers = []
    requirement_names: tuple[str, ...] = ()
    dependency_warning = None
    tools = layer_inputs.data_tools(spec)
    extra = layer_inputs.extra_requirements(spec, inputs.base)
    if inputs.requirements or tools or extra:
        requirements = RequirementsFile.read(inputs.requirements)
        lines = requirements.lines
        requirement_names = (*lines, *extra)
        names = [*requirements.names, *filter(None, map(requirement_name, extra))]
        cached = dependency_layer.cached_layer(spec, inputs.base)
        dependency_warning = (
            torch_warning.layer_warning(cached.packages, cached.sizes, cached.blob.size, spec.base_image)
            if cached
            else torch_warning.requirements_warning(names, inputs.base, spec.base_image)
        )
        detail = f"{len(lines)} lines of requirements.txt, " if inputs.requirements else ""
        detail += f"the data step's {', '.join(tools)}, " if tools else ""
        detail += f"{' and '.join(extra)} (the GPU sampler's NVML binding, the plugin's), " if extra else ""
        detail += (
            f"cached: {counted(len(cached.packages), 'package')}, {size_text(cached.blob.size)}"
            if cached
            else "resolved at build time"
        )
        if inputs.base.provides:
            detail += "; skips what the base provides"
        layers.append(LayerPlan("dependencies", layout.DEPS_DIR, None, None, detail))
    layers.append(
        LayerPlan(
            "runtime", layout.LIB_DIR, len(inputs.runtime.files), inputs.runtime.total_bytes, "vdk-ml-training runtime"
        )
    )
    layers.append(
        LayerPlan(
            "code",
            layout.JOB_DIR,
            len(inputs.code.files),
            inputs.code.total_bytes,
            f"{len(inputs.code.excluded)} excluded",
        )
    )
    return ImagePlan(
        job=spec.name,
        reference=str(target),
        base_image=spec.base_image,
        base=inputs.base,
        layers=tuple(layers),
        requirements=requirement_names,
        excluded=inputs.code.excluded,
        large_files=inputs.code.large_files,
        working_dir=layout.JOB_DIR,
        command=inputs.command,
        env=image_env("$PATH", None, bool(inputs.requirements or tools or extra)),
        labels=inputs.labels,
        dependency_warning=dependency_warning,
        credential_warnings=tuple(inputs.code.credential_warnings()),
    )
