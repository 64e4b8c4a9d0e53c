"""What an image says of itself once pushed (image/sbom.py, image/provenance.py): what is in it, layer by layer,
and what it was built from. The build fills `ImageFacts` (image/build.py) from what it has at hand, the deploy adds
`BuildParameters` (what it was asked: config.ini, the overrides, the datasets pinned); no module here reads
anything."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.job.image_reference import parse_reference


@dataclass(frozen=True)
class ImageLayer:
    name: str  # base, dependencies, runtime, code
    digest: str  # sha256:... of the compressed blob
    size: int
    media_type: str


@dataclass(frozen=True)
class ImageFacts:
    """A pushed job image and what went into it."""

    registry: str  # host[:port] it was pushed to
    repository: str  # path in that registry
    digest: str  # sha256:... of its manifest: the subject of what is attached
    media_type: str  # of its manifest (a job image keeps its base's flavour: OCI or Docker)
    size: int  # of its manifest
    tag: str | None
    created: str  # the image's creation time (fixed for reproducible images: build_plan.created_timestamp)
    job: str
    team: str | None
    base_image: str  # as config.ini names it
    base_reference: str  # registry/repo@sha256:... it was pinned to
    python: str
    python_version: str
    wheel_platform: str
    layers: tuple[ImageLayer, ...]  # in the manifest's order, the base's first
    packages: tuple[tuple[str, str], ...] = ()  # (name, version) of the dependency layer
    licenses: dict[str, str] = field(default_factory=dict)  # name -> licence its metadata declares
    lock: Lock = field(default_factory=lambda: Lock("", {}))  # the dependency layer's pins with their hashes
    base_packages: tuple[tuple[str, str], ...] = ()  # (name, version) the base's interpreter has, when read
    base_packages_read: bool = False  # False: the base was known from the table or config.ini, not read
    code_files: dict[str, str] = field(default_factory=dict)  # path in the code layer -> sha256 of its content
    git_commit: str | None = None
    git_dirty: bool = False
    git_diff_sha256: str | None = None
    git_remote: str | None = None  # without credentials (source/audit.py)
    started: str = ""  # when the build started and the push finished, RFC 3339 UTC
    finished: str = ""
    # base_image and base_reference parsed, as the build holds them (the spec parsed the one, the registry pinned
    # the other): not parsed again from the text (None: parsed when needed)
    base_written: ImageReference | None = field(default=None, compare=False, repr=False)
    base_pinned: ImageReference | None = field(default=None, compare=False, repr=False)

    @property
    def written_base(self) -> ImageReference:
        """base_image, parsed."""
        return self.base_written or parse_reference(self.base_image)

    @property
    def pinned_base(self) -> ImageReference:
        """base_reference, parsed."""
        return self.base_pinned or parse_reference(self.base_reference)

    @property
    def name(self) -> str:
        """registry/repository, as a subject's name."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.digest}"

    @property
    def subject(self) -> dict:
        """The image's OCI descriptor: what an attached manifest names as its `subject`."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class BuildParameters:
    """What the build was asked, beyond the image's own inputs: its external parameters."""

    config_sha256: str | None  # of the job's config.ini
    overrides: tuple[tuple[str, str], ...] = ()  # `--set KEY=VALUE`, `--args`
    data: tuple[dict, ...] = ()  # each dataset as pinned (datafetch/data_pins.DataPin.to_dict())
    deployer: str = ""
