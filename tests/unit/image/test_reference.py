"""What the builder needs of registry addresses (image/reference.py): a registry setting split into its host and
path, and whether a host is loopback. (Image references themselves: tests/unit/job/test_image_reference.py.)"""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.image.reference import is_loopback
from vdk.plugin.ml_training.image.reference import split_registry
from vdk.plugin.ml_training.job.image_reference import DOCKER_HUB


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
