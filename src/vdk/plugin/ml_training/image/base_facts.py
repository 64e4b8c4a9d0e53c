"""What a base image brings: its interpreter, Python version, installed packages and C library.

The launch command runs the base's own interpreter, and the dependency layer is installed for
exactly this base, so it neither reinstalls torch (and its gigabytes of CUDA wheels) nor ships
wheels the base's Python cannot load. Three sources, in this order of precedence:
`[ml-training]` keys (`base_python`, `base_python_version`, `base_provides`), then a table of
well-known bases (recognised from the reference alone: the fast path), else what reading the
base itself found (`BaseFacts`, see base_inspection.py). This module decides; it reads nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training.image.build_errors import BaseImageError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.image_reference import DOCKER_HUB
from vdk.plugin.ml_training.job.image_reference import ImageReference
from vdk.plugin.ml_training.vocabulary.human_units import counted

DEFAULT_WHEEL_PLATFORM = "x86_64-manylinux_2_28"  # glibc 2.28: what nearly every Linux image has
MUSL_PLATFORM = "x86_64-unknown-linux-musl"
# pip installs torch's own dependencies (CUDA libraries, triton) with it; the base has them all.
_PYTORCH_PROVIDES = ("torch", "torchvision", "torchaudio", "numpy", "pyyaml", "triton", "torchelastic")
_NGC_PROVIDES = ("torch", "torchvision", "numpy", "triton", "apex", "transformer-engine", "flash-attn")
# Packages whose version a base pins for the resolution of the rest (torchvision & co. must match torch).
PINNED_FROM_BASE = ("torch", "torchvision", "torchaudio")
# glibc of the Linux releases bases are built on -> uv's --python-platform.
_GLIBC_PLATFORM = {
    "bullseye": "x86_64-manylinux_2_31",
    "bookworm": "x86_64-manylinux_2_36",
    "trixie": "x86_64-manylinux_2_40",
    "ubuntu20.04": "x86_64-manylinux_2_31",
    "ubuntu22.04": "x86_64-manylinux_2_35",
    "ubuntu24.04": "x86_64-manylinux_2_39",
    "el8": "x86_64-manylinux_2_28",
    "el9": "x86_64-manylinux_2_34",
    "el10": "x86_64-manylinux_2_39",
    "amzn2023": "x86_64-manylinux_2_34",
}
_DEBIAN_RELEASES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
_ENTERPRISE_LINUX = ("rhel", "centos", "rocky", "almalinux", "ol")


@dataclass(frozen=True)
class BaseFacts:
    """What reading a base image found (base_inspection.py); None where it could not tell."""

    digest: str  # the manifest digest it was read from
    python: str | None  # what the launch command should start: `python3`, or an absolute path off the PATH
    python_path: str | None  # where that leads in the image, links resolved: /usr/bin/python3.11
    python_reason: str  # why that interpreter (or why none was found)
    python_version: str | None  # "3.11"
    version_reason: str
    distributions: tuple[tuple[str, str], ...]  # (normalised name, version) the interpreter can import
    site_dirs: tuple[str, ...]  # where they were looked for
    wheel_platform: str | None  # from /etc/os-release
    os_name: str | None  # its PRETTY_NAME


@dataclass(frozen=True)
class BaseInfo:
    python_version: str  # "3.11"
    provides: tuple[str, ...]  # normalised package names the dependency layer leaves out
    pins: tuple[tuple[str, str], ...]  # versions the base has, which resolution must agree with
    wheel_platform: str  # uv's --python-platform
    source: str  # where the answer came from, for the plan and for messages
    python: str  # the interpreter the image's command starts: `python`, `python3` or an absolute path
    python_reason: str  # why that one, for the plan

    def describe(self) -> str:
        more = len(self.provides) - 10
        shown = ", ".join(self.provides[:10]) + (f" and {more} more" if more > 0 else "")
        provided = (
            f"{counted(len(self.provides), 'package')}: {shown}" if self.provides else "nothing the job needs to skip"
        )
        return f"Python {self.python_version}, {self.wheel_platform} wheels; base provides {provided} ({self.source})"


def public_version(version: str) -> str:
    """`2.13.0+cpu` -> `2.13.0`: `==2.13.0` then matches any local build of it (PEP 440)."""
    return version.split("+", 1)[0]


def platform_of_os(os_release: dict[str, str]) -> str | None:
    """uv's --python-platform for the distribution /etc/os-release describes; None if unknown."""
    distro = os_release.get("ID", "").lower()
    like = os_release.get("ID_LIKE", "").lower().split()
    version = os_release.get("VERSION_ID", "").strip()
    if distro == "alpine":
        return MUSL_PLATFORM
    if distro == "debian":
        codename = os_release.get("VERSION_CODENAME") or _DEBIAN_RELEASES.get(version.split(".")[0], "")
        return _GLIBC_PLATFORM.get(codename)
    if distro == "ubuntu":
        return _GLIBC_PLATFORM.get(f"ubuntu{version}")
    if distro in _ENTERPRISE_LINUX or "rhel" in like:
        return _GLIBC_PLATFORM.get(f"el{version.split('.')[0]}")
    if distro == "amzn":
        return _GLIBC_PLATFORM.get(f"amzn{version}")
    return None


@dataclass(frozen=True)
class _Known:
    python_version: str | None
    provides: tuple[str, ...] = ()
    pins: tuple[tuple[str, str], ...] = ()
    wheel_platform: str = DEFAULT_WHEEL_PLATFORM
    name: str = ""
    python_reason: str = "`python` on its PATH"


def _pytorch(tag: str) -> _Known:
    # pytorch/pytorch:<torch version>-cuda<X>-cudnn<Y>-runtime|devel, Ubuntu 22.04, conda Python
    # (pytorch/pytorch's Dockerfile: /opt/conda, `ENV PATH /opt/conda/bin:$PATH`).
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", tag)
    name = "pytorch/pytorch"
    conda = "conda's `python` in /opt/conda/bin, on its PATH"
    if not match:
        return _Known(None, _PYTORCH_PROVIDES, name=name, python_reason=conda)
    major, minor = int(match.group(1)), int(match.group(2))
    # 2.5 and later: Python 3.11 (the Dockerfile's PYTHON_VERSION); 1.13-2.4: Python 3.10.
    python = "3.11" if (major, minor) >= (2, 5) else "3.10" if (major, minor) >= (1, 13) else None
    pins = (("torch", match.group(0)),) if match.group(3) is not None else ()
    return _Known(python, _PYTORCH_PROVIDES, pins, _GLIBC_PLATFORM["ubuntu22.04"], name, conda)


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
    # python:<X.Y[.Z]>[-slim][-<debian release>|-alpine<version>]; Python built into /usr/local.
    match = re.match(r"^(3\.\d{1,2})(?:\.\d+)?(?:-(.*))?$", tag)
    reason = "`python` in /usr/local/bin, on its PATH"
    if not match:
        return _Known(None, name="python", python_reason=reason)
    variant = match.group(2) or ""
    platform = DEFAULT_WHEEL_PLATFORM
    if variant.startswith("alpine"):
        platform = MUSL_PLATFORM
    else:
        for release, glibc in _GLIBC_PLATFORM.items():
            if release in variant:
                platform = glibc
    return _Known(match.group(1), (), (), platform, "python", reason)


def _well_known(ref: ImageReference) -> _Known | None:
    tag = ref.tag or ""
    if ref.registry == DOCKER_HUB and ref.repository == "pytorch/pytorch":
        return _pytorch(tag)
    if ref.registry == "nvcr.io" and ref.repository == "nvidia/pytorch":
        return _ngc_pytorch(tag)
    if ref.registry == DOCKER_HUB and ref.repository == "library/python":
        return _python(tag)
    return None


def table_entry(ref: ImageReference) -> _Known | None:
    """The table's answer for a reference (None for bases it does not know, or a tag it cannot read)."""
    known = _well_known(ref)
    return known if known is not None and known.python_version is not None else None


def needs_reading(spec: MLJobSpec) -> bool:
    """Whether the base must be read to know it: neither the table nor the keys say it all."""
    if table_entry(spec.base_reference) is not None:
        return False
    return not (spec.base_python and spec.base_python_version)


def base_info(spec: MLJobSpec, found: BaseFacts | None = None) -> BaseInfo:
    """What spec.base_image brings: `[ml-training]` keys over the table, else over what reading the
    base `found`. BaseImageError if something stays unknown."""
    known = None if found is not None else table_entry(spec.base_reference)
    config = spec.config_path.name
    python, python_reason = _interpreter(spec, known, found)
    version = spec.base_python_version or (known.python_version if known else found.python_version if found else None)
    if version is None:
        raise _unknown_version(spec, found)
    if known:
        provides = [*known.provides, *spec.base_provides]
        pins, platform = known.pins, known.wheel_platform
        source = f"well-known base {known.name}"
    elif found:
        provides = [name for name, _ in found.distributions] + list(spec.base_provides)
        versions = dict(found.distributions)
        pins = tuple((name, public_version(versions[name])) for name in PINNED_FROM_BASE if name in versions)
        platform = found.wheel_platform or DEFAULT_WHEEL_PLATFORM
        source = "read from the base image" + (f" ({found.os_name})" if found.os_name else "")
    else:
        provides, pins, platform, source = list(spec.base_provides), (), DEFAULT_WHEEL_PLATFORM, ""
    overridden = [key for key in ("base_python_version", "base_provides") if getattr(spec, key)]
    if overridden:
        keys = " and ".join(overridden)
        source = f"{source}; {keys} in {config}" if source else f"{keys} in {config}"
    return BaseInfo(
        python_version=version,
        provides=tuple(dict.fromkeys(canonicalize_name(n) for n in provides)),
        pins=pins,
        wheel_platform=platform,
        source=source,
        python=python,
        python_reason=python_reason,
    )


def _interpreter(spec: MLJobSpec, known: _Known | None, found: BaseFacts | None) -> tuple[str, str]:
    if spec.base_python:
        return spec.base_python, f"base_python in {spec.config_path.name}"
    if known:
        return "python", f"the well-known base {known.name} has {known.python_reason}"
    if found and found.python:
        return found.python, found.python_reason
    if found:
        raise BaseImageError(
            f"base image {spec.base_image} has no Python interpreter the builder could find: {found.python_reason}",
            "use a base image with Python (a PyTorch image, or python:3.11-slim), or name its interpreter in "
            "[ml-training]: `base_python = /path/to/python`",
        )
    # Unreachable through the build (an unknown base without keys is read first); kept for direct callers.
    raise BaseImageError(
        f"{spec.config_path}: the builder does not know base image {spec.base_image} and has not read it",
        "describe it in [ml-training]: `base_python = python3`, `base_python_version = 3.11`, and "
        "`base_provides = torch, numpy` for packages the base already has",
    )


def _unknown_version(spec: MLJobSpec, found: BaseFacts | None) -> BaseImageError:
    where = f"{found.python_path} ({found.version_reason})" if found else "its interpreter"
    return BaseImageError(
        f"{spec.config_path}: cannot tell which Python version base image {spec.base_image} has: {where}; "
        "the dependency layer must be built for it",
        "add `base_python_version = 3.11` (the base's `python --version`) to [ml-training], and "
        "`base_provides = torch, numpy` for packages the base already has",
    )
