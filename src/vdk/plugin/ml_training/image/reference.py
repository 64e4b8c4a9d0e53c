"""What the builder needs of registry addresses beside the image references themselves (job/image_reference.py,
which the spec holds parsed): a registry address split into host and path, and whether a host is loopback."""

from __future__ import annotations

import ipaddress

from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.job.image_reference import DOCKER_HUB
from vdk.plugin.ml_training.job.image_reference import is_host


def split_registry(text: str) -> tuple[str, str]:
    """`registry.example.com/ml` -> ("registry.example.com", "ml"); a bare name means Docker Hub."""
    text = text.strip().rstrip("/")
    for scheme in ("https://", "http://"):
        if text.startswith(scheme):
            raise ImageBuildError(
                f"registry {text!r} starts with {scheme}", f"leave the scheme out: {text[len(scheme) :]}"
            )
    first, _, rest = text.partition("/")
    if is_host(first):
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
