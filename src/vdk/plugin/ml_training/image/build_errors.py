"""What can go wrong while building or pushing a job image, each with what to do about it."""

from __future__ import annotations

from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.errors import MLTrainingError


class ImageBuildError(MLTrainingError):
    """The image could not be built (job directory, base image, plugin installation)."""


class BaseImageError(ImageBuildError):
    """The base image is unknown to the builder, missing, or has no linux/amd64 variant."""


# requirements.txt that uv cannot install: raised where the dependency layer and a local run's overlay share it
DependencyError = uv_install.DependencyError
NoWheelError = uv_install.NoWheelError


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
