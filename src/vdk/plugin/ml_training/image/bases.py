"""What a base image brings: its Python version, the packages it already has, its C library.

The dependency layer is installed for exactly this, so it neither reinstalls torch (and its
gigabytes of CUDA wheels) nor ships wheels the base's Python cannot load. Well-known bases are
recognised from their reference; for any other, `[ml-training] base_python_version` (and
optionally `base_provides`) say it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vdk.plugin.ml_training.image.errors import BaseImageError
from vdk.plugin.ml_training.image.reference import DOCKER_HUB
from vdk.plugin.ml_training.image.reference import parse_reference
from vdk.plugin.ml_training.job import MLJobSpec

DEFAULT_WHEEL_PLATFORM = "x86_64-manylinux_2_28"  # glibc 2.28: what nearly every Linux image has
# pip installs torch's own dependencies (CUDA libraries, triton) with it; the base has them all.
_PYTORCH_PROVIDES = ("torch", "torchvision", "torchaudio", "numpy", "pyyaml", "triton", "torchelastic")
_NGC_PROVIDES = ("torch", "torchvision", "numpy", "triton", "apex", "transformer-engine", "flash-attn")
# glibc of the Debian/Ubuntu releases the well-known bases are built on -> uv's --python-platform.
_GLIBC_PLATFORM = {
    "bullseye": "x86_64-manylinux_2_31",
    "bookworm": "x86_64-manylinux_2_36",
    "trixie": "x86_64-manylinux_2_40",
    "ubuntu22.04": "x86_64-manylinux_2_35",
    "ubuntu24.04": "x86_64-manylinux_2_39",
}


@dataclass(frozen=True)
class BaseInfo:
    python_version: str  # "3.11"
    provides: tuple[str, ...]  # normalised package names the dependency layer leaves out
    pins: tuple[tuple[str, str], ...]  # versions the base has, which resolution must agree with
    wheel_platform: str  # uv's --python-platform
    source: str  # where the answer came from, for the plan and for messages

    def describe(self) -> str:
        provided = ", ".join(self.provides) or "nothing the job needs to skip"
        return f"Python {self.python_version}, {self.wheel_platform} wheels; base provides {provided} ({self.source})"


def normalise(name: str) -> str:
    """PEP 503 name: `Transformer_Engine` -> `transformer-engine`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class _Known:
    python_version: str | None
    provides: tuple[str, ...] = ()
    pins: tuple[tuple[str, str], ...] = ()
    wheel_platform: str = DEFAULT_WHEEL_PLATFORM
    name: str = ""


def _pytorch(tag: str) -> _Known:
    # pytorch/pytorch:<torch version>-cuda<X>-cudnn<Y>-runtime|devel, Ubuntu 22.04, conda Python.
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", tag)
    name = "pytorch/pytorch"
    if not match:
        return _Known(None, _PYTORCH_PROVIDES, name=name)
    major, minor = int(match.group(1)), int(match.group(2))
    # 2.5 and later: Python 3.11 (the Dockerfile's PYTHON_VERSION); 1.13-2.4: Python 3.10.
    python = "3.11" if (major, minor) >= (2, 5) else "3.10" if (major, minor) >= (1, 13) else None
    pins = (("torch", match.group(0)),) if match.group(3) is not None else ()
    return _Known(python, _PYTORCH_PROVIDES, pins, _GLIBC_PLATFORM["ubuntu22.04"], name)


def _ngc_pytorch(tag: str) -> _Known:
    # nvcr.io/nvidia/pytorch:<YY.MM>-py3: 23.xx-24.xx Ubuntu 22.04 + Python 3.10; 25.xx on Ubuntu 24.04 + 3.12.
    match = re.match(r"^(\d\d)\.(\d\d)", tag)
    name = "nvcr.io/nvidia/pytorch"
    if not match or int(match.group(1)) < 23:
        return _Known(None, _NGC_PROVIDES, name=name)
    if int(match.group(1)) >= 25:
        return _Known("3.12", _NGC_PROVIDES, (), _GLIBC_PLATFORM["ubuntu24.04"], name)
    return _Known("3.10", _NGC_PROVIDES, (), _GLIBC_PLATFORM["ubuntu22.04"], name)


def _python(tag: str) -> _Known:
    # python:<X.Y[.Z]>[-slim][-<debian release>|-alpine<version>]
    match = re.match(r"^(3\.\d{1,2})(?:\.\d+)?(?:-(.*))?$", tag)
    if not match:
        return _Known(None, name="python")
    variant = match.group(2) or ""
    platform = DEFAULT_WHEEL_PLATFORM
    if variant.startswith("alpine"):
        platform = "x86_64-unknown-linux-musl"
    else:
        for release, glibc in _GLIBC_PLATFORM.items():
            if release in variant:
                platform = glibc
    return _Known(match.group(1), (), (), platform, "python")


def _well_known(base_image: str) -> _Known | None:
    ref = parse_reference(base_image)
    tag = ref.tag or ""
    if ref.registry == DOCKER_HUB and ref.repository == "pytorch/pytorch":
        return _pytorch(tag)
    if ref.registry == "nvcr.io" and ref.repository == "nvidia/pytorch":
        return _ngc_pytorch(tag)
    if ref.registry == DOCKER_HUB and ref.repository == "library/python":
        return _python(tag)
    return None


def base_info(spec: MLJobSpec) -> BaseInfo:
    """What spec.base_image brings; `[ml-training]` keys override the table. BaseImageError if unknown."""
    known = _well_known(spec.base_image)
    python = spec.base_python_version or (known.python_version if known else None)
    if python is None:
        what = f"{known.name} tag {spec.base_image.rpartition(':')[2]!r}" if known else "it"
        raise BaseImageError(
            f"{spec.config_path}: cannot tell which Python version base image {spec.base_image} has "
            f"(the builder does not know {what}); the dependency layer must be built for it",
            "add `base_python_version = 3.11` (the base's `python --version`) to [ml-training], and "
            "`base_provides = torch, numpy` for packages the base already has",
        )
    provides = tuple(dict.fromkeys(normalise(n) for n in [*(known.provides if known else ()), *spec.base_provides]))
    if spec.base_python_version and known and known.python_version:
        source = f"base_python_version in {spec.config_path.name}"
    elif known:
        source = f"well-known base {known.name}"
    else:
        source = f"base_python_version in {spec.config_path.name}"
    return BaseInfo(
        python_version=python,
        provides=provides,
        pins=known.pins if known else (),
        wheel_platform=known.wheel_platform if known else DEFAULT_WHEEL_PLATFORM,
        source=source,
    )
