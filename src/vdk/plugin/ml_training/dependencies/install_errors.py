"""What goes wrong while uv installs a job's requirements (the image's dependency layer, a local run's overlay),
each with what to do: a requirement that cannot be resolved, one without a wheel, and a full disk — reported as a
full disk, with where and how much is free, not as a bad requirement; whether uv hit it (its words on stderr) or
the plugin's own writes did (ENOSPC, EDQUOT)."""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from vdk.plugin.ml_training.dependencies.uv_messages import FirstIndex
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.vocabulary.human_units import size_text
from vdk.plugin.ml_training.vocabulary.local_cache import CACHE_DIR


class DependencyError(MLTrainingError):
    """requirements.txt could not be resolved or installed for the Python it was meant for."""


class NoWheelError(DependencyError):
    """A requirement has no wheel uv may install for the target, and no source distribution it may build."""

    def __init__(self, packages: list[str], described: str, detail: str):
        self.packages = packages
        names = ", ".join(packages) if packages else "a requirement"
        super().__init__(
            f"{names} has no wheel for {described} on the package indexes, and no source distribution that may be "
            f"built into one.\n{detail}".rstrip(),
            f"pin a version of {names} that publishes a wheel for {described}; or build the wheel yourself "
            "(`pip wheel PACKAGE`) and add a `--find-links DIR` or `--extra-index-url URL` line to requirements.txt; "
            "or install it in your base image and list it in `base_provides`",
        )


class SourceBuildError(DependencyError):
    """A requirement published only as a source distribution that vdk does not build into a wheel: one with native
    code (a compiler and headers, and a wheel for the target's platform), or one whose build failed."""

    def __init__(self, packages: list[str], described: str, reason: str, again: str):
        self.packages = packages
        names = ", ".join(packages)
        super().__init__(
            f"{names} is installed from its source distribution (no wheel for {described}), which vdk builds "
            f"into a wheel only when it is pure Python: {reason}",
            f"pin a version of {names} that publishes a wheel for {described}; or build its wheel where it will "
            "run (`pip wheel PACKAGE` in the base image) and add a `--find-links DIR` line to requirements.txt; or "
            f"install it in your base image and list it in `base_provides`. Then {again}",
        )


class FirstIndexError(DependencyError):
    """`index_strategy = first-index`: a version only a later package index has was not searched for."""

    def __init__(self, found: FirstIndex, described: str, again: str):
        later = f" ({found.later_index} was not searched for it)" if found.later_index else ""
        super().__init__(
            f"{found.requested} cannot be installed for {described}: {found.index} is the first package index "
            f"that has {found.package}, without that version, and `index_strategy = first-index` takes a package "
            f"only from the first index that has it{later}; it guards against dependency confusion (a public "
            "index shadowing a private package's name)",
            "if you trust every index equally, set `index_strategy = best-match` in [ml-training] (every index is "
            f"searched and the best version wins, as pip does); or pin a version {found.index} has. Then {again}",
        )


# The mark of a requirement vdk adds to the job's own (a sweep's Optuna: image/plugin_packages.py), what for after it:
# `optuna==4.5.0  # added by vdk: the sweep's trial client`. A failure that names it blames vdk's pin, not the job.
ADDED_MARK = "# added by vdk:"


def added_requirements(requirements: Path) -> dict[str, tuple[str, str]]:
    """The requirements vdk added to `requirements` (ADDED_MARK): canonical name -> (requirement, what for)."""
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    added = {}
    for line in lines:
        requirement, mark, why = line.partition(ADDED_MARK)
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if mark and name:
            added[re.sub(r"[-_.]+", "-", name.group(1)).lower()] = (requirement.strip(), why.strip())
    return added


class AddedRequirementError(DependencyError):
    """A requirement vdk adds to the job's own (at the version vdk runs with) cannot be installed from the job's
    package indexes: the fix is to name it in requirements.txt, whose version vdk then takes."""

    def __init__(self, added: dict[str, tuple[str, str]], described: str, detail: str, again: str):
        pins = ", ".join(f"`{requirement}`" for requirement, _ in added.values())
        why = "; ".join(dict.fromkeys(why for _, why in added.values() if why))
        names = ", ".join(added)
        super().__init__(
            f"{pins} cannot be installed for {described}: not a requirement of yours, vdk adds it ({why}) at the "
            f"version it runs with here.\n{detail}".rstrip(),
            f"name {names} in the job's requirements.txt with a version your package index has "
            f"(`{next(iter(added))}==VERSION`): vdk then installs yours instead of adding its own. Then {again}",
        )


class DiskFullError(DependencyError):
    """A disk filled up while requirements.txt was installed (uv's cache's, or the install's: the image's
    dependency layer, a local run's overlay): not a bad requirement."""

    def __init__(self, where: str, free: str):
        super().__init__(
            f"the disk is full: no space left on the device of {where} ({free}) while installing "
            "requirements.txt; the requirements themselves are not at fault",
            "free space on that disk (`uv cache clean` empties uv's download cache), or set "
            f"{CACHE_DIR} and UV_CACHE_DIR to directories on a disk with room, then try again",
        )


# uv's words for ENOSPC and EDQUOT (Rust's io::Error shows the errno).
_UV_SAYS_FULL = re.compile(r"No space left on device|Disk quota exceeded|os error 28\b|os error 122\b")


def raise_if_full(error: OSError, place: Path) -> None:
    """DiskFullError in place of `error` when it is ENOSPC or EDQUOT (call it in the except block); `place`: where
    the install writes, named when the error names no file."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        raise disk_full_error(error.filename or place) from None


def raise_if_uv_said(stderr: str, uv_env: Mapping[str, str], place: Path) -> None:
    """DiskFullError when uv's stderr says a disk was full: its cache's, or `place`'s (where it installs)."""
    if _UV_SAYS_FULL.search(stderr):
        raise disk_full_error(uv_cache_dir(uv_env), place)


def disk_full_error(*places: str | Path) -> DiskFullError:
    """The disk-full error naming the fullest of `places` (where the install writes, uv's cache) and its free
    space."""
    free: list[tuple[int, str]] = []
    for place in places:
        path = Path(place)
        while not path.exists() and path != path.parent:
            path = path.parent
        try:
            free.append((shutil.disk_usage(path).free, str(place)))
        except OSError:
            continue
    if not free:
        return DiskFullError(str(places[0]), "no space free")
    room, where = min(free)
    return DiskFullError(where, f"{size_text(room)} free once the unfinished install was removed")


def uv_cache_dir(uv_env: Mapping[str, str]) -> str:
    """Where uv keeps its downloads: $UV_CACHE_DIR, else $XDG_CACHE_HOME/uv, else ~/.cache/uv."""
    if uv_env.get("UV_CACHE_DIR"):
        return uv_env["UV_CACHE_DIR"]
    xdg = uv_env.get("XDG_CACHE_HOME")
    return str(Path(xdg if xdg else Path.home() / ".cache") / "uv")
