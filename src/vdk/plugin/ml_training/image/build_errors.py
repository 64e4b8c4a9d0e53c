"""What can go wrong while building or pushing a job image, each with what to do about it."""

from __future__ import annotations

from vdk.plugin.ml_training.dependencies import install_errors
from vdk.plugin.ml_training.errors import MLTrainingError


class ImageBuildError(MLTrainingError):
    """The image could not be built (job directory, base image, plugin installation)."""


class BaseImageError(ImageBuildError):
    """The base image is unknown to the builder, missing, or has no linux/amd64 variant."""


# requirements.txt that uv cannot install, or a full disk: raised where the dependency layer and a local run's
# overlay share it
DependencyError = install_errors.DependencyError
NoWheelError = install_errors.NoWheelError
DiskFullError = install_errors.DiskFullError


class RegistryError(MLTrainingError):
    """The registry answered with an error the builder cannot work around."""

    status: int | None = None  # the HTTP status of the refusal, when the registry answered one


class RegistryAuthError(RegistryError):
    """The registry refused the credentials (or there were none)."""


class RegistryUnreachableError(RegistryError):
    """The registry could not be reached, even after retries."""


class RegistryNameError(RegistryUnreachableError):
    """The registry's name does not resolve (DNS): not retried, and the fix says what to set instead."""
