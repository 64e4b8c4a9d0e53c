"""Image references (`host/path:tag@digest`) split the way Docker and podman read them, in the spec's layer: the
spec holds its base image parsed (`MLJobSpec.base_reference`), once, and every reader of the base (the builder,
its checks, the table of well-known bases) takes that value instead of parsing the text again. The grammar of the
parts is names.py's; image/reference.py has what only the builder needs (registry addresses, loopback hosts)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.names import DIGEST
from vdk.plugin.ml_training.job.names import REPOSITORY_COMPONENT
from vdk.plugin.ml_training.job.names import TAG

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"


class ImageReferenceError(MLTrainingError):
    """A text that is not an image reference."""


@dataclass(frozen=True)
class ImageReference:
    registry: str  # host[:port]; docker.io for Docker Hub
    repository: str  # path inside the registry, e.g. library/busybox
    tag: str | None = None
    digest: str | None = None
    # The text it was parsed from, as written (None for a reference made otherwise): whoever holds the text and
    # the value tells by it whether the value is that text's.
    written: str | None = field(default=None, compare=False, repr=False)

    @property
    def api_host(self) -> str:
        return api_host(self.registry)

    @property
    def ref(self) -> str:
        """What a manifest request names: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> ImageReference:
        return replace(self, tag=None, digest=digest, written=None)

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def api_host(registry: str) -> str:
    """Where a registry's API lives (Docker Hub's differs from its name)."""
    return DOCKER_HUB_API if registry == DOCKER_HUB else registry


def is_host(component: str) -> bool:
    """Whether the first component of a reference or registry address names a host (else: Docker Hub)."""
    return "." in component or ":" in component or component == "localhost"


def parse_reference(text: str) -> ImageReference:
    """`busybox` -> docker.io/library/busybox:latest; `host:5000/a/b@sha256:..` kept as written."""
    written = text
    text = text.strip()
    rest, _, digest = text.partition("@")
    if digest and not DIGEST.match(digest):
        raise ImageReferenceError(
            f"{text!r}: {digest!r} is not a sha256 digest", "write it as name@sha256:<64 hex digits>"
        )
    first, slash, remainder = rest.partition("/")
    if slash and is_host(first):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    tag = None
    name, colon, maybe_tag = path.rpartition(":")
    if colon and "/" not in maybe_tag:
        path, tag = name, maybe_tag
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path or not all(REPOSITORY_COMPONENT.match(c) for c in path.split("/")):
        raise ImageReferenceError(
            f"{text!r} is not an image reference", "write it like registry.example.com/team/image:tag"
        )
    if tag is not None and not TAG.match(tag):
        raise ImageReferenceError(f"{text!r}: {tag!r} is not a valid tag", "tags are letters, digits, '_', '.' and '-'")
    if tag is None and not digest:
        tag = "latest"
    return ImageReference(registry, path, tag, digest or None, written)
