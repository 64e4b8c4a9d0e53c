"""The code layer's manifest: every file the image's code layer holds (source/job_files.py, the same rules) and
the sha256 of its content (a symbolic link: of its target's text). The run record keeps it, and `vdk deploy` and
`vdk diff` compare two of them file by file."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path

from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.source.job_files import SourceFile
from vdk.plugin.ml_training.source.job_files import scan_job_dir

CHUNK = 1 << 20


def code_manifest(job: Path | FileSet) -> dict[str, str]:
    """path (as in the image's job directory) -> sha256 of every file of the code layer. `job`: the job directory,
    or its files as the command found them already (scan_job_dir)."""
    files = job if isinstance(job, FileSet) else scan_job_dir(Path(job))
    return file_digests(files.files)


def file_digests(files: Iterable[SourceFile]) -> dict[str, str]:
    """path -> sha256 of each file's content (a symbolic link: of its target's text)."""
    out = {}
    for source in files:
        if source.link is not None:
            out[source.path] = hashlib.sha256(f"link:{source.link}".encode()).hexdigest()
            continue
        digest = hashlib.sha256()
        with open(source.source, "rb") as f:
            for chunk in iter(functools.partial(f.read, CHUNK), b""):
                digest.update(chunk)
        out[source.path] = digest.hexdigest()
    return out
