"""An image's facts as a build gathers them (image/image_facts.py), for the unit tests of what is attached."""

from __future__ import annotations

import dataclasses

from vdk.plugin.ml_training.dependencies.lock import Lock
from vdk.plugin.ml_training.image.image_facts import ImageFacts
from vdk.plugin.ml_training.image.image_facts import ImageLayer

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def image_facts(**changes) -> ImageFacts:
    facts = ImageFacts(
        registry="registry.example.com:5000",
        repository="ml/mnist-ddp",
        digest="sha256:" + "ab" * 32,
        media_type="application/vnd.oci.image.manifest.v1+json",
        size=1234,
        tag="0f1e2d3c4b5a69788796",
        created="1970-01-01T00:00:01Z",
        job="mnist-ddp",
        team="vision",
        base_image="python:3.11-slim",
        base_reference="docker.io/library/python@sha256:" + "cd" * 32,
        python="python",
        python_version="3.11",
        wheel_platform="x86_64-manylinux_2_36",
        layers=(
            ImageLayer("base", "sha256:" + "11" * 32, 100, LAYER),
            ImageLayer("dependencies", "sha256:" + "22" * 32, 200, LAYER),
            ImageLayer("runtime", "sha256:" + "33" * 32, 300, LAYER),
            ImageLayer("code", "sha256:" + "44" * 32, 400, LAYER),
        ),
        packages=(("numpy", "2.4.6"), ("six", "1.17.0")),
        licenses={"numpy": "BSD-3-Clause AND 0BSD", "six": "MIT License"},
        lock=Lock("numpy==2.4.6\nsix==1.17.0\n", {"numpy": ("55" * 32,), "six": ("66" * 32, "77" * 32)}),
        base_packages=(("pip", "24.0"), ("setuptools", "65.5.0")),
        base_packages_read=True,
        code_files={"train.py": "88" * 32, "lib/model.py": "99" * 32},
        git_commit=COMMIT,
        git_dirty=True,
        git_diff_sha256="ee" * 32,
        git_remote="https://git.example.com/ml/jobs.git",
        started="2026-01-02T03:04:05Z",
        finished="2026-01-02T03:05:06Z",
    )
    return dataclasses.replace(facts, **changes)
