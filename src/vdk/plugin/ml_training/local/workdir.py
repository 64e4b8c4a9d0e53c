"""The working directory of a local run: exactly the files the job's image holds in its code layer
(source/job_files.py: the same .gitignore/.vdkignore rules, no secrets), outside the job directory. What the
code writes (checkpoints, logs, output directories) stays out of the job and out of the next image, and
a file the image would lack is missing here too.

How files get there, so that it is fast for large job directories and the job directory comes out of the
run byte for byte as it went in, whatever the run's processes do:
- files up to COPY_LIMIT are copied: code, configs and small data cost little to copy;
- bigger files are cloned where the filesystem can (a reflink: copy-on-write, instant, safe);
- else, where the run's processes get the job directory read-only (local/job_dir_mount.py: a mount
  namespace of their own, on Linux), they are symbolic links to the job's files: free, and no write can
  follow them (the ranks turn Python's writes through such a link into a write to a private copy first,
  runtime/job_dir_protection.py; any other write fails with EROFS instead of changing the file);
- else (no mount namespaces: macOS, some containers) they are copied too, up to BIG_FILES_LIMIT bytes in
  all: beyond, the run stops before it starts, saying which files to move out of the job directory.
A hard link is never used: it would share the file itself.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.source.job_files import Excluded
from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.source.job_files import SourceFile
from vdk.plugin.ml_training.source.job_files import scan_job_dir
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text

COPY_LIMIT = 4 * 1024 * 1024  # bytes: copied up to this size, cloned, linked or copied above it
BIG_FILES_LIMIT = 2 * 1024**3  # bytes of big files a run copies where it cannot protect the job directory
_FICLONE = 0x40049409  # Linux ioctl: make the destination share the source's blocks, copy-on-write


@dataclass(frozen=True)
class WorkDir:
    """A prepared working directory and what it was made from."""

    path: Path
    job_dir: Path
    excluded: tuple[Excluded, ...] = ()  # what the image leaves out, and so does this directory
    linked: tuple[str, ...] = ()  # big files reached through a symbolic link to the job's file
    placed: tuple[str, ...] = ()  # the job's files put here (relative paths): what a run found here, not wrote

    def to_job_paths(self, text: str) -> str:
        """`text` (a traceback, a stack dump) with this directory's paths shown as the job's files."""
        return text.replace(f"{self.path}{os.sep}", f"{self.job_dir}{os.sep}") if text else text

    def exclusion(self, relpath: str) -> Excluded | None:
        """Why `relpath` (relative to the job directory) is not here though the job has it, or None."""
        relpath = relpath.strip("/")
        for item in self.excluded:
            excluded = item.path.rstrip("/")
            if relpath == excluded or (item.path.endswith("/") and relpath.startswith(excluded + "/")):
                return item
        return None


def prepare(job_dir: Path, into: Path, protected: bool = True, files: FileSet | None = None) -> WorkDir:
    """Fill the new directory `into` with the job's code-layer files; MLTrainingError if that fails. `protected`:
    the run's processes get the job directory read-only (job_dir_mount.py), so big files may be linked; else
    they are copied (at most BIG_FILES_LIMIT bytes of them). `files`: the job directory's files as the command
    found them already (the code layer's: scan_job_dir); default: found now."""
    job_dir = Path(job_dir).resolve()
    files = files if files is not None else scan_job_dir(job_dir)
    run_dir = into.resolve().parent
    inside = run_dir if run_dir.is_relative_to(job_dir) else None  # runs kept inside the job are no part of it
    placed = [f for f in files.files if inside is None or inside not in f.source.parents]
    if not protected:
        _check_copy_size(job_dir, placed)
    into.mkdir(parents=True)
    linked = []
    try:
        for source in placed:
            target = into / source.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not _place(source, target, may_link=protected):
                linked.append(source.path)
    except OSError as e:
        raise MLTrainingError(
            f"cannot prepare the working directory {into} from {job_dir}: {e}",
            "check that the job directory is readable and that the disk of the run directory has room",
        ) from None
    return WorkDir(into, job_dir, files.excluded, tuple(linked), tuple(f.path for f in placed))


def _place(source: SourceFile, target: Path, may_link: bool) -> bool:
    """Put one file in place; False when it is a symbolic link to the job's file."""
    if source.link is not None:
        os.symlink(source.link, target)  # a link inside the job: it points to the same file here
        return True
    if source.size <= COPY_LIMIT:
        shutil.copyfile(source.source, target)
    elif not _clone(source.source, target):
        if may_link:
            os.symlink(source.source, target)
            return False
        shutil.copyfile(source.source, target)
    os.chmod(target, 0o755 if source.executable else 0o644)  # as the image has it
    return True


def _check_copy_size(job_dir: Path, files: list[SourceFile]) -> None:
    """Where big files must be copied: refused, before anything is made, when they are too many bytes."""
    big = sorted((f for f in files if f.link is None and f.size > COPY_LIMIT), key=lambda f: -f.size)
    total = sum(f.size for f in big)
    if total <= BIG_FILES_LIMIT:
        return
    named = ", ".join(f"{f.path} ({size_text(f.size)})" for f in big[:3]) + (", ..." if len(big) > 3 else "")
    raise MLTrainingError(
        f"{job_dir} holds {size_text(total)} in {counted(len(big), 'file')} over {size_text(COPY_LIMIT)} ({named}); "
        "a local run copies them into its working directory here, because this machine cannot give the run the job "
        "directory "
        f"read-only (no mount namespaces), and copies at most {size_text(BIG_FILES_LIMIT)}",
        "move data out of the job directory and read it from its path (or, on the cluster, a mount: "
        "docs/data.md), or leave it out of the job with .vdkignore; they also go into the job's image as they are",
    )


def _clone(source: Path, target: Path) -> bool:
    """A copy-on-write clone of `source` (btrfs, XFS, ...); False where the filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import fcntl

    try:
        with open(source, "rb") as src, open(target, "wb") as dst:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
        return True
    except OSError as e:
        target.unlink(missing_ok=True)
        if e.errno in (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.EBADF, errno.ENOSYS):
            return False
        raise
