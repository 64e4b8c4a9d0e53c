"""The files of a job directory that its code has wherever it runs: what an image's code layer holds and
what a local run's working directory holds, with what was left out and why (source/ignore_rules.py).

Pure: reads the job directory, imports nothing of the image builder, so local runs use it too."""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.source import ignore_rules

LARGE_FILE_BYTES = 50 * 1000 * 1000  # 50 MB: data belongs in storage, not in the image


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, '/'-separated: where it goes below the layer's directory
    source: Path  # where it is read from
    size: int
    executable: bool = False
    link: str | None = None  # target of a symbolic link (kept as a link)


@dataclass(frozen=True)
class Excluded:
    path: str  # relative; directories end with '/'
    reason: str


@dataclass(frozen=True)
class FileSet:
    root: Path
    files: tuple[SourceFile, ...]
    excluded: tuple[Excluded, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def large_files(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.size > LARGE_FILE_BYTES)


def scan_job_dir(job_dir: Path) -> FileSet:
    """Every file of the job directory that belongs in the image, sorted; and what does not."""
    job_dir = Path(job_dir).resolve()
    rules = ignore_rules.IgnoreRules(job_dir)
    files: list[SourceFile] = []
    excluded: list[Excluded] = []
    root_rules = rules.nested("", job_dir)
    _walk(job_dir, "", rules, [root_rules] if root_rules else [], files, excluded)
    files.sort(key=lambda f: f.path.encode())
    excluded.sort(key=lambda e: e.path.encode())
    return FileSet(job_dir, tuple(files), tuple(excluded))


def _walk(
    directory: Path,
    reldir: str,
    rules: ignore_rules.IgnoreRules,
    nested: list,
    files: list[SourceFile],
    excluded: list[Excluded],
) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as e:
        raise MLTrainingError(f"cannot read {directory}: {e.strerror}", "check the directory's permissions") from None
    for entry in entries:
        relpath = f"{reldir}/{entry.name}" if reldir else entry.name
        path = Path(entry.path)
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as e:
            excluded.append(Excluded(relpath, f"unreadable ({e.strerror})"))
            continue
        if stat.S_ISLNK(info.st_mode):
            _add_link(path, relpath, rules, nested, files, excluded)
        elif stat.S_ISDIR(info.st_mode):
            reason = ignore_rules.always_excluded_dir(entry.name, path) or rules.check(relpath, True, nested)
            if reason:
                excluded.append(Excluded(relpath + "/", reason))
                continue
            inner = rules.nested(relpath, path)
            _walk(path, relpath, rules, nested + [inner] if inner else nested, files, excluded)
        elif stat.S_ISREG(info.st_mode):
            reason = (
                ignore_rules.always_excluded_file(relpath, entry.name)
                or rules.check(relpath, False, nested)
                or ignore_rules.secret_content(path, info.st_size)
            )
            if reason:
                excluded.append(Excluded(relpath, reason))
            else:
                files.append(SourceFile(relpath, path, info.st_size, bool(info.st_mode & stat.S_IXUSR)))
        else:
            excluded.append(Excluded(relpath, "not a regular file (socket, device or pipe)"))


def _add_link(
    path: Path,
    relpath: str,
    rules: ignore_rules.IgnoreRules,
    nested: list,
    files: list[SourceFile],
    excluded: list[Excluded],
) -> None:
    root = rules.job_dir
    target = os.readlink(path)
    resolved = (path.parent / target).resolve()
    if os.path.isabs(target) or not (resolved == root or root in resolved.parents):
        excluded.append(Excluded(relpath, f"symbolic link to {target}, outside the job directory"))
        return
    reason = ignore_rules.always_excluded_file(relpath, path.name) or rules.check(relpath, False, nested)
    if reason:
        excluded.append(Excluded(relpath, reason))
        return
    files.append(SourceFile(relpath, path, 0, link=_link_inside(root, relpath, target, resolved)))


def _link_inside(root: Path, relpath: str, target: str, resolved: Path) -> str:
    """The link's target as a path that stays in the job directory: one that leaves it through `..` and comes
    back (`../my-job/data`) would dangle where the job is copied (the image's /opt/vdk-ml/job, a local run's
    working directory), so it is rewritten to the path inside."""
    parent = posixpath.dirname(relpath)
    lexical = posixpath.normpath(posixpath.join(parent, target))
    if lexical != ".." and not lexical.startswith("../"):
        return target
    return os.path.relpath(resolved, root / parent)
