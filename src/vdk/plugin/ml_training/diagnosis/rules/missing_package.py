"""A module the run could not import: a package not installed where `vdk run` runs, one the job's image
lacks (not in requirements.txt), torch missing from the image, or the job's own module that its image
leaves out. On a cluster, the same error in a rank's log."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import log_tail
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error
from vdk.plugin.ml_training.source.import_check import distribution_for
from vdk.plugin.ml_training.source.import_check import listed_for
from vdk.plugin.ml_training.source.job_files import Excluded
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS
from vdk.plugin.ml_training.source.requirements import RequirementsFile

_IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError")
_NO_TORCH = "No module named 'torch'"
_NO_MODULE = re.compile(r"No module named '([^']+)'")

# In a cluster rank's log.
NOT_IN_IMAGE = Fix(
    r"ModuleNotFoundError: No module named '([^']+)'",
    "a module is missing from the image: add the package to the job's requirements.txt and deploy again",
)


def import_failed(evidence: Evidence) -> Finding | None:
    """A rank raised ModuleNotFoundError or ImportError."""
    reported = reported_error(evidence)
    if reported is None or reported[2].get("type") not in _IMPORT_ERRORS:
        return None
    local, _, error = reported
    if local.in_image:
        return local_failure(evidence, _missing_in_image_fix(error, local.spec.job_dir, local.again))
    return local_failure(evidence, _missing_here_fix(error, local))


def no_torch_in_image(evidence: Evidence) -> Finding | None:
    """torchrun itself could not start in the job's image: its Python has no torch."""
    local = evidence.local
    if local is None or not local.in_image or evidence.blame is not None or local.agent_log is None:
        return None
    if _NO_TORCH not in log_tail(local.agent_log):
        return None
    return local_failure(
        evidence,
        f"the image's Python has no torch: list torch in {local.spec.job_dir / 'requirements.txt'} (it goes "
        "into the image's dependency layer), or set `base_image` in [ml-training] to a base with torch, such as "
        f"pytorch/pytorch. Then {local.again}",
    )


def _missing_here_fix(error: Mapping[str, Any], local: LocalFacts) -> str:
    """The job's dependencies: listed in requirements.txt, which the image installs into its dependency layer
    and a local run into its overlay (or, with `requirements_overlay = false`, installed where vdk runs by
    whoever manages that environment); or the job's own module, which the image (and so the run) leaves out."""
    again = local.again
    job_dir = local.spec.job_dir
    requirements = job_dir / REQUIREMENTS
    missing = _NO_MODULE.search(error.get("message", ""))
    top = missing.group(1).split(".")[0] if missing else None
    excluded = _excluded_module(local, top) if top else None
    if excluded is not None:
        return (
            f"`{top}` is the job's own module ({excluded.path}), which its image leaves out ({excluded.reason}), "
            f"so the cluster run would not find it either: {excluded.way_back(job_dir)}. Then {again}"
        )
    listed = listed_for(RequirementsFile.read(requirements), top) if top else None
    if local.spec.requirements_overlay:  # the run's packages: requirements.txt in its overlay, and vdk's environment
        both = (
            "`vdk deploy` installs that file into the image's dependency layer, and `vdk run` into the run's "
            "overlay (vdk's own environment stays as it is)"
        )
        if top is None:
            return (
                "the installed version of a package lacks what the code imports: pin the version the code needs "
                f"in {requirements} (`<package>==<version>`): {both}. Then {again}"
            )
        if listed:
            return (
                f"{listed} is in {requirements}, but what uv installed from it for this Python has no `{top}` (a "
                "marker that leaves it out here, or another distribution provides the module): check that line, "
                f"or add the distribution that provides `{top}`: {both}. Then {again}"
            )
        return f"add {distribution_for(top)} (which provides `{top}`) to {requirements}: {both}. Then {again}"
    yours = "`requirements_overlay = false` in [ml-training]: you manage the environment vdk runs in"
    image = f"list it in {requirements}: `vdk deploy` installs that file into the image's dependency layer"
    if top is None:
        return (
            "the installed version of a package lacks what the code imports: install the version the code needs "
            f"where vdk runs (`{sys.executable} -m pip install '<package>==<version>'`; {yours}) and {image}, "
            f"pinned. Then {again}"
        )
    if listed:
        return (
            f"{listed} (which provides `{top}`) is in {requirements} but not installed where vdk runs ({yours}): "
            f"`{sys.executable} -m pip install -r {requirements}`. Then {again}"
        )
    distribution = distribution_for(top)
    return (
        f"install {distribution} (which provides `{top}`) where vdk runs (`{sys.executable} -m pip install "
        f"{distribution}`; {yours}) and {image}. Then {again}"
    )


def _missing_in_image_fix(error: Mapping[str, Any], job_dir: Path, again: str) -> str:
    """A module the image lacks: what is installed where vdk runs is not in the image."""
    requirements = job_dir / REQUIREMENTS
    missing = _NO_MODULE.search(error.get("message", ""))
    if not missing:
        return (
            "the image has another version of a package than the code needs: pin the version the code needs in "
            f"{requirements} (`<package>==<version>`), the image's dependency layer. Then {again}"
        )
    top = missing.group(1).split(".")[0]
    here = _distributions_here(top)
    if here:
        return (
            f"add {' or '.join(here)} to {requirements}: it provides `{top}` where vdk runs (which is why the "
            f"smoke run without --container passes), but the image has only what its base and requirements.txt "
            f"give it. Then {again}"
        )
    return (
        f"add the package that provides `{top}` to {requirements} (its name may differ from the module's): the "
        f"image has only what its base and requirements.txt give it. Then {again}"
    )


def _distributions_here(module: str) -> list[str]:
    """The installed distributions that provide a top-level module where vdk runs ("yaml" -> PyYAML)."""
    if not _importable_here(module):
        return []
    try:
        return sorted(set(importlib.metadata.packages_distributions().get(module, [])))
    except Exception:  # noqa: BLE001 - broken metadata of some package: no name to suggest
        return []


def _importable_here(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _excluded_module(local: LocalFacts, top: str) -> Excluded | None:
    if local.left_out is None:
        return None
    for candidate in (f"{top}.py", top):
        if (local.spec.job_dir / candidate).exists():
            return local.left_out(candidate)
    return None
