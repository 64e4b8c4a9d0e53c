"""The import check of `vdk run` and `vdk deploy` (source/import_check.py) as a use case: an undeclared
import fails before anything runs or is built, with the file, line, module, the distribution to add and
where. When the base image's packages are not known yet (a base never read: `vdk run` contacts no
registry), what may come from it is a note instead, returned for the caller to show."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.source.import_check import ImportCheck
from vdk.plugin.ml_training.source.import_check import Undeclared
from vdk.plugin.ml_training.source.import_check import check_imports
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS

SKIP_OPTION = "--skip-import-check"  # the flag of `vdk run` and `vdk deploy` that skips the check, as fixes name it


class ImportCheckFailed(MLTrainingError):
    """The job imports a module its image would not have."""


def check_job_imports(spec: MLJobSpec, base_provides: Iterable[str] | None) -> list[str]:
    """Raise ImportCheckFailed for imports the image lacks; `base_provides` None: the base is unknown, and
    what it may provide is only noted: the notes are returned."""
    if not spec.import_check:
        return []
    requirements = spec.job_dir / REQUIREMENTS
    result = check_imports(
        spec.job_dir,
        spec.entrypoint_file,
        spec.import_root,
        requirements if requirements.is_file() else None,
        base_provides,
        spec.base_provides,  # named by the user: they count even before the base is read
    )
    if result.passed:
        return []
    if not result.base_known:  # notes, for the caller to show (as notes: without a `note:` of their own)
        return [f"{_site(item)} is not in {REQUIREMENTS}; {_from_base(spec)}" for item in result.undeclared]
    raise failure(spec, result)


def failure(spec: MLJobSpec, result: ImportCheck) -> ImportCheckFailed:
    count = len(result.undeclared)
    lines = [f"{spec.name} imports {count} module{'s' if count != 1 else ''} its image would not have:"]
    lines += [f"  {_site(item)}" for item in result.undeclared]
    requirements = spec.job_dir / REQUIREMENTS
    pins = ", ".join(f"`{_pin(item)}`" for item in result.undeclared)
    where = str(requirements) if requirements.is_file() else f"{requirements} (a new file)"
    them = "it" if count == 1 else "them"
    return ImportCheckFailed(
        "\n".join(lines),
        f"add {pins} to {where}: the image installs what it lists, and the base image {spec.base_image} does "
        f"not have {them} (if it does, name {them} in `base_provides` of [ml-training]); "
        f"{_locally(spec, result, them)}. An optional import: guard it with `try: ... except ImportError:`. "
        f"If the check is wrong, pass {SKIP_OPTION} (or set `import_check = false` in [ml-training])",
    )


def _locally(spec: MLJobSpec, result: ImportCheck, them: str) -> str:
    """Where a local run gets what requirements.txt lists: its overlay, or the environment its user manages
    (then, for what is not installed there, the command that installs it)."""
    if spec.requirements_overlay:
        return f"`vdk run` installs {them} from there too, into the run's overlay, and never into vdk's own environment"
    managed = "for local runs (`requirements_overlay = false` in [ml-training]: you manage that environment)"
    missing = [item.distribution for item in result.undeclared if not item.version]
    if not missing:
        return f"{managed}, install {them} where vdk runs too"
    names = " ".join(missing)
    return f"{managed}, install {names} where vdk runs too: `{sys.executable} -m pip install {names}`"


def _site(item: Undeclared) -> str:
    here = f", {item.version} here" if item.version else ", not installed here"
    return f"{item.site.path}:{item.site.line}: `{item.site.statement}` needs {item.distribution}{here}"


def _pin(item: Undeclared) -> str:
    """`name==version` as an index has it: without a local build's label (`2.13.0+cpu` -> `2.13.0`)."""
    return f"{item.distribution}=={item.version.split('+')[0]}" if item.version else item.distribution


def _from_base(spec: MLJobSpec) -> str:
    return (
        f"it must come from the base image {spec.base_image}, whose packages are not known yet (`vdk deploy` "
        "reads the base and checks again; `base_provides` in [ml-training] names them)"
    )
