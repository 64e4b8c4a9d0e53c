"""Daemonless, reproducible job images: base image + dependency layer + runtime layer + code layer,
pushed to any OCI registry through its HTTP API.

    plan = plan_image(spec, registry, provenance)       # contacts nothing: the dry run
    print(plan.render(), file=sys.stderr)
    image = build_and_push(spec, registry, provenance, progress=StderrProgress())
    image.reference                                     # registry/repo@sha256:...
"""

from vdk.plugin.ml_training.image.build import PushedImage
from vdk.plugin.ml_training.image.build import PushedLayer
from vdk.plugin.ml_training.image.build import build_and_push
from vdk.plugin.ml_training.image.errors import BaseImageError
from vdk.plugin.ml_training.image.errors import DependencyError
from vdk.plugin.ml_training.image.errors import ImageBuildError
from vdk.plugin.ml_training.image.errors import NoWheelError
from vdk.plugin.ml_training.image.errors import RegistryAuthError
from vdk.plugin.ml_training.image.errors import RegistryError
from vdk.plugin.ml_training.image.errors import RegistryUnreachableError
from vdk.plugin.ml_training.image.plan import ImagePlan
from vdk.plugin.ml_training.image.plan import plan_image
from vdk.plugin.ml_training.image.progress import Progress
from vdk.plugin.ml_training.image.progress import StderrProgress
from vdk.plugin.ml_training.image.registry import RetryPolicy

__all__ = [
    "BaseImageError",
    "DependencyError",
    "ImageBuildError",
    "ImagePlan",
    "NoWheelError",
    "Progress",
    "PushedImage",
    "PushedLayer",
    "RegistryAuthError",
    "RegistryError",
    "RegistryUnreachableError",
    "RetryPolicy",
    "StderrProgress",
    "build_and_push",
    "plan_image",
]
