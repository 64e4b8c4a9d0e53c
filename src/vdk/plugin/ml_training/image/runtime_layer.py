"""The files of the runtime layer (the plugin's runtime package, its data step's: datafetch/, and the vocabulary both
speak: vocabulary/); those of the code layer are the job's own files (source/job_files.py)."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.source.job_files import SourceFile

# What the pods run of the plugin: the training processes' runtime, the data step, and what both import.
PACKAGES = ("runtime", "datafetch", "vocabulary")


def runtime_package_dir() -> Path:
    """The installed `vdk.plugin.ml_training` package, whose runtime/ ships in every image."""
    import vdk.plugin.ml_training as package

    return Path(package.__file__).resolve().parent


def scan_runtime_package(package_dir: Path | None = None) -> FileSet:
    """`vdk/plugin/ml_training/__init__.py` and every `.py` of the packages the pods run (PACKAGES), as they lie
    below LIB_DIR."""
    package_dir = Path(package_dir or runtime_package_dir())
    prefix = "vdk/plugin/ml_training"
    init = package_dir / "__init__.py"
    files = [SourceFile(f"{prefix}/__init__.py", init, init.stat().st_size)]
    for package in (package_dir / name for name in PACKAGES):
        if not package.is_dir():
            continue
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(package_dir).as_posix()
            files.append(SourceFile(f"{prefix}/{rel}", path, path.stat().st_size))
    files.sort(key=lambda f: f.path.encode())
    return FileSet(package_dir, tuple(files))
