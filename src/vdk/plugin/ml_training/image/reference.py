"""Image references (`host/path:tag@digest`) split the way Docker and podman read them; the grammar of their parts
is job/names.py's."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from dataclasses import replace

from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.job.names import DIGEST
from vdk.plugin.ml_training.job.names import REPOSITORY_COMPONENT
from vdk.plugin.ml_training.job.names import TAG

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"


@dataclass(frozen=True)
class ImageReference:
    registry: str  # host[:port]; docker.io for Docker Hub
    repository: str  # path inside the registry, e.g. library/busybox
    tag: str | None = None
    digest: str | None = None

    @property
    def api_host(self) -> str:
        return api_host(self.registry)

    @property
    def ref(self) -> str:
        """What a manifest request names: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> ImageReference:
        return replace(self, tag=None, digest=digest)

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


def _is_host(component: str) -> bool:
    return "." in component or ":" in component or component == "localhost"


def parse_reference(text: str) -> ImageReference:
    """`busybox` -> docker.io/library/busybox:latest; `host:5000/a/b@sha256:..` kept as written."""
    text = text.strip()
    rest, _, digest = text.partition("@")
    if digest and not DIGEST.match(digest):
        raise ImageBuildError(f"{text!r}: {digest!r} is not a sha256 digest", "write it as name@sha256:<64 hex digits>")
    first, slash, remainder = rest.partition("/")
    if slash and _is_host(first):
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
        raise ImageBuildError(
            f"{text!r} is not an image reference", "write it like registry.example.com/team/image:tag"
        )
    if tag is not None and not TAG.match(tag):
        raise ImageBuildError(f"{text!r}: {tag!r} is not a valid tag", "tags are letters, digits, '_', '.' and '-'")
    if tag is None and not digest:
        tag = "latest"
    return ImageReference(registry, path, tag, digest or None)


def split_registry(text: str) -> tuple[str, str]:
    """`registry.example.com/ml` -> ("registry.example.com", "ml"); a bare name means Docker Hub."""
    text = text.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if text.startswith(scheme):
            raise ImageBuildError(
                f"registry {text!r} starts with {scheme}", f"leave the scheme out: {text[len(scheme) :]}"
            )
    first, _, rest = text.partition("/")
    if _is_host(first):
        return first, rest
    return DOCKER_HUB, text


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost (with or without a port)."""
    name = host
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
