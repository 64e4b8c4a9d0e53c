"""What the plugin's code in a job's pods needs besides the job's own requirements, at the versions `vdk` runs
with: a sweep's Optuna client of its trial pods and the study's gRPC storage proxy (runtime/sweep_*.py); the writer
of the TensorBoard event files of runs that keep an output directory (runtime/board_events.py: tensorboardX, whose
numpy and protobuf are resolved with the job's requirements, so only what neither the base nor they have is added).
The dependency layer installs them from a requirements file that includes the job's own
(layer_inputs.requirements_file)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from vdk.plugin.ml_training.dependencies.install_errors import ADDED_MARK
from vdk.plugin.ml_training.image.build_cache import write_atomically
from vdk.plugin.ml_training.source.requirements import RequirementsFile
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

SWEEP_PACKAGES = ("optuna", "grpcio", "protobuf")
BOARD_PACKAGES = ("tensorboardX",)
# What vdk adds each of its packages to a job's requirements for (said when one cannot be installed).
WHY = {
    **dict.fromkeys(SWEEP_PACKAGES, "a sweep's trials report to its Optuna study with it"),
    **dict.fromkeys(BOARD_PACKAGES, "a run's series are written as TensorBoard event files with it"),
}


def plugin_requirements(own: Path | None, packages: tuple[str, ...], name: str) -> Path:
    """A requirements file `name` (in the build cache, keyed by what it holds) of the job's own `own` (included by
    path, its digest in a comment, so that a change of it is a new file) and `packages` pinned to the versions
    installed here, each marked as vdk's addition (a failure to install it says so); a package the job's own file
    names is left to it."""
    from importlib import metadata

    lines = []
    named: set[str] = set()
    if own is not None:
        lines += [f"# {own.name} sha256 {hashlib.sha256(own.read_bytes()).hexdigest()}", f"-r {own.resolve()}"]
        named = set(RequirementsFile.read(own).names)
    for package in packages:
        if package in named:
            continue  # the job pins it itself: its version, not vdk's
        try:
            pinned = f"{package}=={metadata.version(package)}"
        except metadata.PackageNotFoundError:
            pinned = package
        lines.append(f"{pinned}  {ADDED_MARK} {WHY[package]}")
    text = "\n".join(lines) + "\n"
    path = cache_root() / "plugin-requirements" / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}-{name}"
    if not path.is_file():  # another command may be reading it (uv): it sees the old file or the whole new one
        write_atomically(path, text)
    return path
