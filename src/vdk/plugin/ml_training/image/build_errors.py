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


class RegistryError(MLTrainingError):
    """The registry answered with an error the builder cannot work around."""


class RegistryAuthError(RegistryError):
    """The registry refused the credentials (or there were none)."""


class RegistryUnreachableError(RegistryError):
    """The registry could not be reached, even after retries."""
