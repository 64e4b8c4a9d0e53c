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
_SHIPPED = "shipped"  # while walking: a file holding a credential that .vdkignore brings back by its name


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
    kind: str = ignore_rules.BY_RULE  # what left it out: ignore_rules.BY_RULE, BY_NAME or BY_CONTENT

    def way_back(self, job_dir: Path) -> str:
        """What ships it after all, as works for why it was left out (source/ignore_rules.py)."""
        return ignore_rules.way_back(self.path, self.reason, self.kind, job_dir)


@dataclass(frozen=True)
class FileSet:
    root: Path
    files: tuple[SourceFile, ...]
    excluded: tuple[Excluded, ...] = ()
    shipped_anyway: tuple[Excluded, ...] = ()  # what holds a credential but a `!PATH` of .vdkignore brings back

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def large_files(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.size > LARGE_FILE_BYTES)

    def credential_warnings(self) -> list[str]:
        """What a build says of the files that hold a credential: each one left out (and what ships it, should
        the job need it), each one shipped because .vdkignore names it."""
        out = [
            f"{e.path} is left out of the image: it holds {e.reason}. If the job needs it: {e.way_back(self.root)}"
            for e in self.excluded
            if e.kind == ignore_rules.BY_CONTENT
        ]
        out += [
            f"{e.path} holds {e.reason} and goes into the image, as `!{e.path}` in {ignore_rules.VDKIGNORE} asks"
            for e in self.shipped_anyway
        ]
        return out


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
    kept = tuple(e for e in excluded if e.kind != _SHIPPED)
    shipped = tuple(Excluded(e.path, e.reason, ignore_rules.BY_CONTENT) for e in excluded if e.kind == _SHIPPED)
    return FileSet(job_dir, tuple(files), kept, shipped)


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
        raise MLTrainingError(
            f"cannot read the directory {directory} of the job: {e.strerror}",
            f"make it readable (`chmod -R u+rX {directory}`), or leave it out of the job with a line `{reldir}/` in "
            f"{ignore_rules.VDKIGNORE}",
        ) from None
    for entry in entries:
        relpath = f"{reldir}/{entry.name}" if reldir else entry.name
        path = Path(entry.path)
        _check_name(rules.job_dir, relpath)
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as e:
            excluded.append(Excluded(relpath, f"unreadable ({e.strerror})"))
            continue
        if stat.S_ISLNK(info.st_mode):
            _add_link(path, relpath, rules, nested, files, excluded)
        elif stat.S_ISDIR(info.st_mode):
            named = ignore_rules.always_excluded_dir(entry.name, path)
            if named:
                excluded.append(Excluded(relpath + "/", named, ignore_rules.BY_NAME))
                continue
            reason = rules.check(relpath, True, nested)
            if reason:
                excluded.append(Excluded(relpath + "/", reason))
                continue
            inner = rules.nested(relpath, path)
            _walk(path, relpath, rules, nested + [inner] if inner else nested, files, excluded)
        elif stat.S_ISREG(info.st_mode):
            named = ignore_rules.always_excluded_file(relpath, entry.name)
            if named:
                excluded.append(Excluded(relpath, named, ignore_rules.BY_NAME))
                continue
            reason = rules.check(relpath, False, nested)
            if reason:
                excluded.append(Excluded(relpath, reason))
                continue
            content = ignore_rules.secret_content(path, info.st_size)
            if content and not rules.named_back(relpath):
                excluded.append(Excluded(relpath, content, ignore_rules.BY_CONTENT))
            else:
                if content:
                    excluded.append(Excluded(relpath, content, _SHIPPED))
                _check_readable(path, relpath)
                files.append(SourceFile(relpath, path, info.st_size, bool(info.st_mode & stat.S_IXUSR)))
        else:
            excluded.append(Excluded(relpath, "not a regular file (socket, device or pipe)"))


def _check_name(root: Path, relpath: str) -> None:
    """A file name must be UTF-8 (an image's file names are; os.scandir keeps other bytes as surrogates)."""
    try:
        relpath.encode("utf-8")
    except UnicodeEncodeError:
        shown = relpath.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise MLTrainingError(
            f"the file name '{shown}' in the job directory {root} is not UTF-8, which an image's file names must be",
            "rename it to a UTF-8 name (`convmv -f latin1 -t utf8 --notest NAME`, or `mv` with a new name), or "
            "delete it",
        ) from None


def _check_readable(path: Path, relpath: str) -> None:
    if not os.access(path, os.R_OK):
        raise MLTrainingError(
            f"cannot read {relpath} of the job directory: permission denied",
            f"make it readable (`chmod u+r {path}`), or leave it out of the job with a line `{relpath}` in "
            f"{ignore_rules.VDKIGNORE}",
        )


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
    try:
        resolved = (path.parent / target).resolve(strict=False)
    except (RuntimeError, OSError):  # a loop (Python 3.11 raises RuntimeError, later ones OSError)
        raise MLTrainingError(
            f"{relpath} in the job directory {root} is a symbolic link that loops ({relpath} -> {target} -> ...)",
            f"remove it (`rm {path}`) or point it at a file",
        ) from None
    if os.path.isabs(target) or not (resolved == root or root in resolved.parents):
        excluded.append(Excluded(relpath, f"symbolic link to {target}, outside the job directory"))
        return
    named = ignore_rules.always_excluded_file(relpath, path.name)
    if named:
        excluded.append(Excluded(relpath, named, ignore_rules.BY_NAME))
        return
    reason = rules.check(relpath, False, nested)
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
