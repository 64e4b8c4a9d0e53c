"""The working directory of a local run: exactly the files the job's image holds in its code layer
(source/job_files.py: the same .gitignore/.vdkignore rules, no secrets), outside the job directory. What the
code writes (checkpoints, logs, output directories) stays out of the job and out of the next image, and
a file the image would lack is missing here too.

How files get there, so that it is fast for large job directories and no write reaches the user's files:
- files up to COPY_LIMIT are copied: code, configs and small data cost little to copy, and a copy is
  the only thing that is safe against every writer, native code included;
- bigger files are cloned where the filesystem can (a reflink: copy-on-write, instant, safe);
- else they are symbolic links to the job's file. A hard link would share the file itself: a script that
  opens it for writing, appends to it or chmods it would change the user's file. A symbolic link is
  replaced, not followed, by whatever writes by rename (atomic saves), and the ranks turn every other
  write through it into a write to a private copy first (runtime/job_dir_protection.py: Python's opens,
  os.truncate/chmod/utime, torch.save and safetensors); the rare native writer that opens such a big
  file in place is the one write that guard does not see.
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
from vdk.plugin.ml_training.source.job_files import SourceFile
from vdk.plugin.ml_training.source.job_files import scan_job_dir

COPY_LIMIT = 4 * 1024 * 1024  # bytes: copied up to this size, cloned or linked above it
_FICLONE = 0x40049409  # Linux ioctl: make the destination share the source's blocks, copy-on-write


@dataclass(frozen=True)
class WorkDir:
    """A prepared working directory and what it was made from."""

    path: Path
    job_dir: Path
    excluded: tuple[Excluded, ...] = ()  # what the image leaves out, and so does this directory
    linked: tuple[str, ...] = ()  # big files reached through a symbolic link to the job's file

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


def prepare(job_dir: Path, into: Path) -> WorkDir:
    """Fill the new directory `into` with the job's code-layer files; MLTrainingError if that fails."""
    job_dir = Path(job_dir).resolve()
    files = scan_job_dir(job_dir)
    into.mkdir(parents=True)
    run_dir = into.resolve().parent
    inside = run_dir if run_dir.is_relative_to(job_dir) else None  # runs kept inside the job are no part of it
    linked = []
    try:
        for source in files.files:
            target = into / source.path
            if inside is not None and inside in source.source.parents:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if not _place(source, target):
                linked.append(source.path)
    except OSError as e:
        raise MLTrainingError(
            f"cannot prepare the working directory {into} from {job_dir}: {e}",
            "check that the job directory is readable and that the disk of the run directory has room",
        ) from None
    return WorkDir(into, job_dir, files.excluded, tuple(linked))


def _place(source: SourceFile, target: Path) -> bool:
    """Put one file in place; False when it is a symbolic link to the job's file."""
    if source.link is not None:
        os.symlink(source.link, target)  # a link inside the job: it points to the same file here
        return True
    if source.size <= COPY_LIMIT:
        shutil.copyfile(source.source, target)
    elif not _clone(source.source, target):
        os.symlink(source.source, target)
        return False
    os.chmod(target, 0o755 if source.executable else 0o644)  # as the image has it
    return True


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
