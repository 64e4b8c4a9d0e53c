"""Registry addresses and what well-known base images bring."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.base_facts import needs_reading
from vdk.plugin.ml_training.image.base_facts import platform_of_os
from vdk.plugin.ml_training.image.build_errors import BaseImageError
from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.image.reference import is_loopback
from vdk.plugin.ml_training.image.reference import split_registry
from vdk.plugin.ml_training.job import load_job_spec


def test_registry_paths_and_loopback():
    assert split_registry("registry.example.com/ml/team") == ("registry.example.com", "ml/team")
    assert split_registry("127.0.0.1:5000") == ("127.0.0.1:5000", "")
    assert split_registry("myuser") == ("docker.io", "myuser")
    with pytest.raises(ImageBuildError, match="leave the scheme out"):
        split_registry("https://registry.example.com")
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost:80") and is_loopback("[::1]:5000")
    assert not is_loopback("10.0.0.1:5000") and not is_loopback("registry.example.com")


def spec_for(tmp_path, base_image, extra=""):
    files = {"train.py": "if __name__ == '__main__':\n    pass\n"}
    return load_job_spec(write_job(tmp_path, "job", ml=f"base_image = {base_image}\n{extra}", files=files))


def test_pytorch_bases_pin_torch_and_leave_it_out(tmp_path):
    info = base_info(spec_for(tmp_path, "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"))
    assert info.python_version == "3.11"
    assert info.pins == (("torch", "2.13.0"),)
    assert {"torch", "torchvision", "torchaudio", "numpy"} <= set(info.provides)
    assert info.wheel_platform == "x86_64-manylinux_2_35"  # Ubuntu 22.04
    assert base_info(spec_for(tmp_path, "pytorch/pytorch:1.13.1-cuda11.6-cudnn8-runtime")).python_version == "3.10"


def test_ngc_and_python_bases(tmp_path):
    ngc = base_info(spec_for(tmp_path, "nvcr.io/nvidia/pytorch:25.01-py3"))
    assert (ngc.python_version, ngc.wheel_platform, ngc.pins) == ("3.12", "x86_64-manylinux_2_39", ())
    assert "transformer-engine" in ngc.provides
    slim = base_info(spec_for(tmp_path, "python:3.12-slim-bookworm"))
    assert (slim.python_version, slim.provides, slim.wheel_platform) == ("3.12", (), "x86_64-manylinux_2_36")
    alpine = base_info(spec_for(tmp_path, "python:3.11-alpine3.19"))
    assert alpine.wheel_platform == "x86_64-unknown-linux-musl"


def test_config_keys_override_and_extend_the_table(tmp_path):
    info = base_info(
        spec_for(
            tmp_path,
            "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
            "base_python_version = 3.12\nbase_provides = deepspeed, Flash_Attn\nbase_python = /opt/conda/bin/python\n",
        )
    )
    assert info.python_version == "3.12"
    assert {"torch", "deepspeed", "flash-attn"} <= set(info.provides)
    assert (info.python, info.python_reason) == ("/opt/conda/bin/python", "base_python in config.ini")
    custom = base_info(
        spec_for(
            tmp_path,
            "registry.example.com/ml/base:7",
            "base_python = python3\nbase_python_version = 3.10\nbase_provides = torch\n",
        )
    )
    assert (custom.python, custom.python_version, custom.provides) == ("python3", "3.10", ("torch",))
    assert custom.source == "base_python_version and base_provides in config.ini"


def test_the_table_is_the_fast_path_and_the_keys_can_describe_any_base(tmp_path):
    """Which bases must be read: those that neither the table nor the keys describe."""
    known = spec_for(tmp_path, "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime")
    assert not needs_reading(known)
    assert base_info(known).python == "python" and "conda" in base_info(known).python_reason
    assert needs_reading(spec_for(tmp_path, "pytorch/pytorch:latest"))  # a tag the table cannot read
    assert needs_reading(spec_for(tmp_path, "registry.example.com/ml/base:7", "base_python_version = 3.11\n"))
    described = spec_for(
        tmp_path, "registry.example.com/ml/base:7", "base_python = python3\nbase_python_version = 3.11\n"
    )
    assert not needs_reading(described)


def test_a_base_that_is_neither_known_nor_read_names_the_keys(tmp_path):
    with pytest.raises(BaseImageError) as caught:
        base_info(spec_for(tmp_path, "registry.example.com/ml/base:7"))
    message = str(caught.value)
    assert "registry.example.com/ml/base:7" in message and "config.ini" in message
    assert "base_python = python3" in caught.value.fix and "base_provides" in caught.value.fix


@pytest.mark.parametrize(
    "os_release, platform",
    [
        ({"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"}, "x86_64-manylinux_2_36"),
        ({"ID": "debian", "VERSION_ID": "11"}, "x86_64-manylinux_2_31"),
        ({"ID": "ubuntu", "VERSION_ID": "24.04"}, "x86_64-manylinux_2_39"),
        ({"ID": "rocky", "ID_LIKE": "rhel centos fedora", "VERSION_ID": "9.4"}, "x86_64-manylinux_2_34"),
        ({"ID": "ol", "VERSION_ID": "8.10"}, "x86_64-manylinux_2_28"),
        ({"ID": "alpine", "VERSION_ID": "3.20.3"}, "x86_64-unknown-linux-musl"),
        ({"ID": "gentoo"}, None),
    ],
)
def test_the_wheel_platform_of_a_distribution(os_release, platform):
    assert platform_of_os(os_release) == platform
