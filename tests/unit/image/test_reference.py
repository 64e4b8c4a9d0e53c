"""Image references split as Docker and podman read them (image/reference.py): the registry, the repository, the
tag and the digest as fields; what a manifest request names; a registry setting; loopback hosts."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.image.reference import DOCKER_HUB
from vdk.plugin.ml_training.image.reference import DOCKER_HUB_API
from vdk.plugin.ml_training.image.reference import ImageReference
from vdk.plugin.ml_training.image.reference import is_loopback
from vdk.plugin.ml_training.image.reference import parse_reference
from vdk.plugin.ml_training.image.reference import split_registry

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("busybox", (DOCKER_HUB, "library/busybox", "latest", None)),
        ("pytorch/pytorch:2.4.0-cuda12.1", (DOCKER_HUB, "pytorch/pytorch", "2.4.0-cuda12.1", None)),
        ("localhost:5000/team/train", ("localhost:5000", "team/train", "latest", None)),
        ("localhost/train:v1", ("localhost", "train", "v1", None)),
        ("nvcr.io/nvidia/pytorch:24.05-py3", ("nvcr.io", "nvidia/pytorch", "24.05-py3", None)),
        (f"reg.example.com:443/ml/base@{DIGEST}", ("reg.example.com:443", "ml/base", None, DIGEST)),
        (f"python:3.11@{DIGEST}", (DOCKER_HUB, "library/python", "3.11", DIGEST)),
        ("  busybox:1  ", (DOCKER_HUB, "library/busybox", "1", None)),
    ],
)
def test_a_reference_splits_into_its_parts(text, fields):
    reference = parse_reference(text)
    assert (reference.registry, reference.repository, reference.tag, reference.digest) == fields


def test_a_reference_names_its_digest_when_pinned_and_reads_back_from_its_text():
    tagged = parse_reference("reg.example.com/ml/base:v2")
    assert tagged.ref == "v2" and str(tagged) == "reg.example.com/ml/base:v2"
    pinned = tagged.with_digest(DIGEST)
    assert (pinned.tag, pinned.digest, pinned.ref) == (None, DIGEST, DIGEST)
    assert parse_reference(str(pinned)) == pinned
    assert ImageReference("r.example", "x").ref == "latest"


def test_docker_hub_is_asked_at_its_api_host():
    assert parse_reference("busybox").api_host == DOCKER_HUB_API
    assert parse_reference("localhost:5000/x").api_host == "localhost:5000"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("busybox@sha256:123", "is not a sha256 digest"),
        ("Team/Image", "is not an image reference"),
        ("reg.example.com/", "is not an image reference"),
        ("busybox:-bad", "is not a valid tag"),
    ],
)
def test_a_malformed_reference_is_a_build_error_with_a_fix(text, why):
    with pytest.raises(ImageBuildError, match=why) as refused:
        parse_reference(text)
    assert refused.value.fix


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("registry.example.com/ml", ("registry.example.com", "ml")),
        ("localhost:5000", ("localhost:5000", "")),
        ("myteam/", (DOCKER_HUB, "myteam")),
    ],
)
def test_a_registry_setting_is_a_host_and_a_path(text, parts):
    assert split_registry(text) == parts


def test_a_registry_setting_with_a_scheme_is_refused_with_the_text_to_write():
    with pytest.raises(ImageBuildError) as refused:
        split_registry("https://registry.example.com/ml")
    assert "registry.example.com/ml" in refused.value.fix


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("localhost:5000", True),
        ("127.0.0.1:5000", True),
        ("127.8.9.1", True),
        ("[::1]:5000", True),
        ("::1", True),
        ("10.0.0.1:5000", False),
        ("registry.example.com", False),
    ],
)
def test_loopback_hosts_with_or_without_a_port(host, loopback):
    assert is_loopback(host) is loopback
