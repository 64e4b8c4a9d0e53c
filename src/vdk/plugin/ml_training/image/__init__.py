"""Daemonless, reproducible job images: base image + dependency layer + runtime layer + code layer,
pushed to any OCI registry through its HTTP API.

    plan = plan_image(spec, registry, provenance)       # contacts nothing: the dry run
    print(plan.render(), file=sys.stderr)
    image = build_and_push(spec, registry, provenance, progress=StderrProgress())
    image.reference                                     # registry/repo@sha256:...

The names below are imported when first used, so that the light modules of the package (bases,
base_cache) can be imported without the registry client (`vdk run` reads what is known of a base).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_EXPORTS = {
    "PushedImage": "build",
    "PushedLayer": "build",
    "build_and_push": "build",
    "BaseImageError": "build_errors",
    "DependencyError": "build_errors",
    "ImageBuildError": "build_errors",
    "NoWheelError": "build_errors",
    "RegistryAuthError": "build_errors",
    "RegistryError": "build_errors",
    "RegistryUnreachableError": "build_errors",
    "RegistryNameError": "build_errors",
    "ImagePlan": "build_plan",
    "plan_image": "build_plan",
    "Progress": "build_progress",
    "StderrProgress": "build_progress",
    "RetryPolicy": "registry_timing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
