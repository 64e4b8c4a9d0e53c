"""What can go wrong while building or pushing a job image, each with what to do about it."""

from __future__ import annotations

from vdk.plugin.ml_training.errors import MLTrainingError


class ImageBuildError(MLTrainingError):
    """The image could not be built (job directory, base image, plugin installation)."""


class BaseImageError(ImageBuildError):
    """The base image is unknown to the builder, missing, or has no linux/amd64 variant."""


class DependencyError(ImageBuildError):
    """requirements.txt could not be resolved or installed for the base image's Python."""


class NoWheelError(DependencyError):
    """A requirement has no wheel for the image's platform and Python version."""

    def __init__(self, packages: list[str], python_version: str, platform: str, detail: str):
        self.packages = packages
        names = ", ".join(packages) if packages else "a requirement"
        super().__init__(
            f"{names} has no pre-built wheel for Python {python_version} on {platform}; job images "
            f"install wheels only (nothing is compiled at deploy time).\n{detail}".rstrip(),
            f"pin a version of {names} that publishes a {platform} wheel for Python {python_version}; "
            "or build the wheel yourself (`pip wheel PACKAGE`) and add a `--find-links DIR` or "
            "`--extra-index-url URL` line to requirements.txt; or install it in your base image and list "
            "it in `base_provides`; or, for pure-Python code, copy it into the job directory",
        )


class DiskFullError(DependencyError):
    """The disk of the build cache (or uv's) filled up while installing requirements.txt: not a bad requirement."""

    def __init__(self, where: str, free: str):
        super().__init__(
            f"the disk is full: no space left on the device of {where} ({free}) while installing "
            "requirements.txt; the requirements themselves are not at fault",
            "free space on that disk (`uv cache clean` empties uv's download cache), or set "
            "VDK_ML_TRAINING_CACHE_DIR and UV_CACHE_DIR to directories on a disk with room, then try again",
        )


class RegistryError(MLTrainingError):
    """The registry answered with an error the builder cannot work around."""


class RegistryAuthError(RegistryError):
    """The registry refused the credentials (or there were none)."""


class RegistryUnreachableError(RegistryError):
    """The registry could not be reached, even after retries."""


class RegistryNameError(RegistryUnreachableError):
    """The registry's name does not resolve (DNS): not retried, and the fix says what to set instead."""
