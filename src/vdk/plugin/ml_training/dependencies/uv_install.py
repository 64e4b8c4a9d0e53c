"""requirements.txt installed by uv into a target directory, for a Python version and platform (a job image's
base) or for this interpreter (a local run's overlay). What the target's Python already has (torch and its CUDA
wheels in a PyTorch base; torch in vdk's environment) is left out with uv's `--excludes`; when its version is pinned
(torch 2.13.0 in pytorch/pytorch:2.13.0-...), the rest is first resolved against that version, so that torchvision
& co. match it. Package indexes: package_index.py; how they are searched: `index_strategy` (every index as pip does,
or uv's first index that has the package), in the one uv argument list of every install (Target.flags).

Wheels, and source distributions that uv builds into wheels (once: uv's cache keeps the built wheel) when they are
pure Python; a source distribution with native code (built for this machine, not the target, or not built at all
for want of a compiler or headers) is refused with the reason (uv_messages.py reads uv's words).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from packaging.utils import canonicalize_name

from vdk.plugin.ml_training import helper_processes
from vdk.plugin.ml_training.dependencies import install_errors
from vdk.plugin.ml_training.dependencies import package_index
from vdk.plugin.ml_training.dependencies import uv_messages
from vdk.plugin.ml_training.dependencies import uv_progress
from vdk.plugin.ml_training.dependencies.install_errors import DependencyError
from vdk.plugin.ml_training.dependencies.install_errors import FirstIndexError
from vdk.plugin.ml_training.dependencies.install_errors import NoWheelError
from vdk.plugin.ml_training.dependencies.install_errors import SourceBuildError
from vdk.plugin.ml_training.dependencies.uv_progress import Activity
from vdk.plugin.ml_training.dependencies.uv_progress import UvProgress
from vdk.plugin.ml_training.vocabulary.package_indexes import DEFAULT_INDEX_STRATEGY
from vdk.plugin.ml_training.vocabulary.package_indexes import INDEX_STRATEGIES

UV_TIMEOUT = 1800
UV_TARGET_LOCK = ".lock"  # uv's lock of a target directory against concurrent installs: no package's file


@dataclass(frozen=True)
class Target:
    """The Python the packages are for: a version and wheel platform (an image's base), or this interpreter
    (both None); what it provides already (left out), and the versions of those it pins."""

    python_version: str | None = None
    platform: str | None = None
    provides: tuple[str, ...] = ()
    pins: tuple[tuple[str, str], ...] = field(default=())
    index_strategy: str = DEFAULT_INDEX_STRATEGY

    @property
    def described(self) -> str:
        if self.python_version is None:
            return f"this Python ({sys.executable})"
        return f"Python {self.python_version} on {self.platform}"

    def flags(self) -> list[str]:
        flags = ["--python", sys.executable]
        if self.python_version is not None:
            flags += ["--python-platform", str(self.platform), "--python-version", self.python_version]
        return [*flags, "--index-strategy", INDEX_STRATEGIES[self.index_strategy]]


def uv_command() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def uv_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")  # cross-installing needs no other interpreter
    env["UV_NO_PROGRESS"] = "1"
    # uv wraps its messages at the terminal's width (a narrow terminal broke `X has no usable\nwheels` in two, and
    # every pattern uv_messages.py reads with it): one line each, however wide the terminal
    env["COLUMNS"] = "10000"
    # pip's indexes and find-links (a company mirror, a directory of wheels) unless uv has its own.
    env.update(package_index.uv_environment(os.environ))
    return env


def index_fingerprint(cwd: Path) -> str:
    """A hash of the package index settings an install run in `cwd` (the job's directory) gets: its environment's
    (pip's handed over) and uv's configuration files'; a part of each install cache's key (package_index.py)."""
    return package_index.fingerprint(uv_environment(), cwd)


def install(
    requirements: Path,
    target_dir: Path,
    cwd: Path,
    target: Target,
    again: str,
    activity: Activity | None = None,
) -> None:
    """Install `requirements` into `target_dir` for `target` (uv runs in `cwd`: relative paths in the file
    are the job directory's). `again`: how the fix of a failure ends ("deploy again"). `activity`: shown uv's
    steps as they come (without one, uv is quiet). Raises DependencyError, NoWheelError, or
    DiskFullError when uv ran out of disk (its cache's or `target_dir`'s)."""
    uv = uv_command()
    flags = target.flags()
    quiet = [] if activity else ["-q"]
    with tempfile.TemporaryDirectory(prefix="vdk-uv-") as scratch:
        work = Path(scratch)
        constraints: list[str] = []
        if target.pins:
            pins = work / "pins.txt"
            pins.write_text("".join(f"{name}=={version}\n" for name, version in target.pins))
            lock = work / "resolved.txt"
            compile_ = [uv, "pip", "compile", str(requirements), "-c", str(pins), *flags]
            listener = UvProgress(activity, resolving_only=True) if activity else None
            argv = [*compile_, "--no-header", "--no-annotate", *quiet, "-o", str(lock)]
            _run_uv(argv, cwd, target, again, listener, target_dir, requirements)
            constraints = ["-c", str(lock)]
        excludes: list[str] = []
        if target.provides:
            provided = work / "provides.txt"
            provided.write_text("".join(f"{name}\n" for name in target.provides))
            excludes = ["--excludes", str(provided)]
        command = [uv, "pip", "install", "--target", str(target_dir), "-r", str(requirements), *constraints]
        listener = UvProgress(activity) if activity else None
        argv = [*command, *excludes, *flags, "--link-mode", "copy", *quiet]
        _run_uv(argv, cwd, target, again, listener, target_dir, requirements)
    (target_dir / UV_TARGET_LOCK).unlink(missing_ok=True)
    native = uv_messages.built_native(target_dir)
    if native:
        tags = ", ".join(f"`{tag}`" for tag in native.values())
        reason = f"it has native code, and its wheel was built for this machine ({tags}), not a portable one"
        raise SourceBuildError(list(native), target.described, reason, again)


def _run_uv(
    argv: list[str],
    cwd: Path,
    target: Target,
    again: str,
    listener: UvProgress | None,
    target_dir: Path,
    requirements: Path,
) -> None:
    if listener is not None:
        listener.started()
    env = uv_environment()
    try:
        done = helper_processes.run(
            argv, cwd=cwd, env=env, timeout=UV_TIMEOUT, on_stderr_line=listener.line if listener else None
        )
    except subprocess.TimeoutExpired:
        raise DependencyError(
            f"installing requirements.txt took longer than {UV_TIMEOUT // 60} minutes",
            f"check the connection to the package index, then {again}",
        ) from None
    if done.returncode == 0:
        return
    install_errors.raise_if_uv_said(done.stderr, env, target_dir)  # a full disk, not a bad requirement
    detail = _uv_message(done.stderr)
    build = uv_messages.failed_build(done.stderr)
    if build is not None:
        raise SourceBuildError([build.package], target.described, build.reason, again)
    no_wheel = uv_messages.packages_without_wheels(done.stderr)
    if no_wheel:
        raise NoWheelError(no_wheel, target.described, detail)
    first = uv_messages.first_index_hint(done.stderr)
    if first is not None:
        raise FirstIndexError(first, target.described, again)
    added = install_errors.added_requirements(requirements)
    blamed = {name: pin for name, pin in added.items() if _names(detail, name)}
    if blamed:
        raise install_errors.AddedRequirementError(blamed, target.described, detail, again)
    raise DependencyError(
        f"requirements.txt cannot be installed for {target.described}:\n{detail}",
        "fix the requirement named above (a version that exists, or one that agrees with the others); "
        f"`uv pip compile requirements.txt` shows the same resolution locally. Then {again}",
    )


def _names(message: str, name: str) -> bool:
    """Whether uv's message names the package `name` (canonical), as a requirement (`optuna==4.5.0`, `optuna`)."""
    spelled = r"[-_.]+".join(re.escape(part) for part in name.split("-"))
    return re.search(rf"(?<![\w.-]){spelled}(?![\w-])", message, re.IGNORECASE) is not None


def _uv_message(stderr: str) -> str:
    """uv's error message: the last lines of its stderr that are not its progress."""
    lines = [line for line in stderr.splitlines() if line.strip() and not uv_progress.is_progress(line)]
    return "\n".join(lines[-15:])


def installed_packages(target_dir: Path) -> tuple[tuple[str, str], ...]:
    """(name, version) of every distribution installed in a target directory."""
    found = [name_and_version(info) for info in target_dir.glob("*.dist-info")]
    return tuple(sorted(named for named in found if named))


def name_and_version(dist_info: Path) -> tuple[str, str] | None:
    name = version = None
    try:
        text = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
        elif not line.strip():
            break
    return (canonicalize_name(name), version) if name and version else None
