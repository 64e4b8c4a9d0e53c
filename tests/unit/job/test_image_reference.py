"""Image references (job/image_reference.py) read as Docker and podman read them, and the spec's base image parsed
once: a copy of the spec carries the parsed value, a spec whose base image changed parses the new one."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import model
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.job.image_reference import ImageReferenceError
from vdk.plugin.ml_training.job.image_reference import parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "text, expected",
    [
        ("busybox", ("docker.io", "library/busybox", "latest", None)),
        (
            "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            ("docker.io", "pytorch/pytorch", "2.13.0-cuda13.0-cudnn9-runtime", None),
        ),
        ("nvcr.io/nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3", None)),
        ("127.0.0.1:5000/base/img:1", ("127.0.0.1:5000", "base/img", "1", None)),
        ("localhost/img", ("localhost", "img", "latest", None)),
        (f"registry.example.com:443/team/img@{DIGEST}", ("registry.example.com:443", "team/img", None, DIGEST)),
        (f"img:tag@{DIGEST}", ("docker.io", "library/img", "tag", DIGEST)),
    ],
)
def test_references_are_read_as_docker_and_podman_read_them(text, expected):
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected


def test_docker_hub_api_host_and_pinning():
    ref = parse_reference("python:3.11-slim")
    assert ref.api_host == "registry-1.docker.io"
    assert str(ref.with_digest(DIGEST)) == f"docker.io/library/python@{DIGEST}"


@pytest.mark.parametrize("bad", ["UPPER/case", "img@sha256:123", "a//b", "img:bad tag"])
def test_bad_references_are_clear_errors(bad):
    with pytest.raises(ImageReferenceError):
        parse_reference(bad)


def test_a_reference_names_its_digest_when_pinned_and_reads_back_from_its_text():
    tagged = parse_reference("reg.example.com/ml/base:v2")
    assert tagged.ref == "v2" and str(tagged) == "reg.example.com/ml/base:v2"
    pinned = tagged.with_digest(DIGEST)
    assert (pinned.tag, pinned.digest, pinned.ref) == (None, DIGEST, DIGEST)
    assert parse_reference(str(pinned)) == pinned
    assert ImageReference("r.example", "x").ref == "latest"


def test_the_spec_parses_its_base_once_and_its_copies_carry_it(tmp_path, monkeypatch):
    parsed: list[str] = []

    def counting(text: str):
        parsed.append(text)
        return parse_reference(text)

    monkeypatch.setattr(model, "parse_reference", counting)
    spec = load_job_spec(write_job(tmp_path, "job", ml="base_image = registry.example.com/ml/base:1\n"))
    assert parsed == ["registry.example.com/ml/base:1"]
    assert (spec.base_reference.registry, spec.base_reference.repository) == ("registry.example.com", "ml/base")
    copy = dataclasses.replace(spec, backend="job")
    assert copy.base_reference is spec.base_reference and len(parsed) == 1
    moved = dataclasses.replace(spec, base_image="python:3.11")
    assert str(moved.base_reference) == "docker.io/library/python:3.11" and len(parsed) == 2
    assert "_base_reference" not in spec.to_dict() and spec.to_dict()["base_image"] == "registry.example.com/ml/base:1"
    assert dataclasses.replace(copy, backend=spec.backend) == spec  # the parsed value is not part of what it is
