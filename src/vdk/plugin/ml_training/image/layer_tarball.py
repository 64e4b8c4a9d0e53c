"""Deterministic layer tarballs: the same files give the same bytes, on any machine, at any time.

Entries are sorted, owned by root, dated FIXED_MTIME, with modes reduced to 0644/0755, and the
gzip header carries no name or timestamp. The layer digest (of the .tar.gz) and the diff_id (of
the plain tar) are computed while writing, so nothing is read twice.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.source.job_files import SourceFile

# What a write of the layer's file fails with (a disk or a quota that is full, a file too big for it): never the
# fault of the job file being read.
_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

FIXED_MTIME = 1  # a constant; 1 rather than 0, which some tools read as "no time"
# Code and runtime layers change on every deploy: compress fast (what go-containerregistry does).
# The dependency layer is built once, cached, and pulled by every node: compress harder.
FAST_GZIP_LEVEL = 1
SMALL_GZIP_LEVEL = 6


@dataclass(frozen=True)
class LayerBlob:
    digest: str  # sha256 of the compressed blob: what the manifest and the registry name
    diff_id: str  # sha256 of the uncompressed tar: what the image config names
    size: int  # bytes of the compressed blob
    path: Path | None = None  # the .tar.gz on disk (None when only the diff_id was computed)


class _Digesting:
    """A write-only file that hashes and counts what passes through, then hands it on."""

    def __init__(self, sink: BinaryIO | gzip.GzipFile | None = None):
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.sink = sink

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info


def _entries(target_dir: str, files: Iterable[SourceFile]) -> list[tuple[tarfile.TarInfo, SourceFile | None]]:
    """Tar entries for `files` placed below `target_dir` (absolute), parent directories included."""
    base = target_dir.strip("/")
    entries: dict[str, tuple[tarfile.TarInfo, SourceFile | None]] = {}
    parts = base.split("/")
    for i in range(1, len(parts) + 1):
        name = "/".join(parts[:i])
        entries[name] = (_dir_info(name), None)
    for f in files:
        name = f"{base}/{f.path}"
        segments = name.split("/")
        for i in range(len(parts) + 1, len(segments)):
            parent = "/".join(segments[:i])
            entries.setdefault(parent, (_dir_info(parent), None))
        info = tarfile.TarInfo(name)
        if f.link is not None:
            info.type = tarfile.SYMTYPE
            info.linkname = f.link
            info.mode = 0o777
        else:
            info.size = f.size
            info.mode = 0o755 if f.executable else 0o644
        entries[name] = (info, f)
    for info, _ in entries.values():
        info.mtime = FIXED_MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = ""
    return [entries[name] for name in sorted(entries, key=lambda n: n.encode())]


def _write_tar(target_dir: str, files: Iterable[SourceFile], out: BinaryIO) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for info, source in _entries(target_dir, files):
            if source is None or source.link is not None:
                tar.addfile(info)
                continue
            try:
                with open(source.source, "rb") as f:
                    if os.fstat(f.fileno()).st_size != source.size:
                        raise ImageBuildError(
                            f"{source.source} changed while the image was being built",
                            "build again once nothing writes into the job directory",
                        )
                    tar.addfile(info, f)
            except OSError as e:
                if e.errno in _WRITE_ERRORS:  # the layer's own write failed (a full disk), not the file's read
                    raise
                raise ImageBuildError(
                    f"cannot read {source.source}: {e.strerror}", "check the file's permissions"
                ) from None


def diff_id(target_dir: str, files: Iterable[SourceFile]) -> str:
    """The diff_id the layer would have, without compressing or storing it."""
    plain = _Digesting()
    _write_tar(target_dir, files, plain)  # type: ignore[arg-type]  # write-only: all a stream-mode tar needs
    return plain.digest


def write_layer(
    target_dir: str, files: Iterable[SourceFile], dest_dir: Path, level: int = FAST_GZIP_LEVEL
) -> LayerBlob:
    """Write the layer as <digest>.tar.gz in dest_dir (atomically) and describe it."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".layer-", suffix=".tar.gz", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as raw:
            compressed = _Digesting(raw)
            with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=level, mtime=0) as gz:
                plain = _Digesting(gz)
                _write_tar(target_dir, files, plain)  # type: ignore[arg-type]  # write-only: enough for tarfile
        final = dest_dir / f"{compressed.sha256.hexdigest()}.tar.gz"
        os.replace(tmp, final)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a write's error names no file: this one
            raise OSError(e.errno, e.strerror, tmp) from e
        raise
    return LayerBlob(compressed.digest, plain.digest, compressed.size, final)
