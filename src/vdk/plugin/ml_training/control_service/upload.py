"""The job's files as a deploy through the Control Service uploads them: a zip whose one top-level folder is the
job (the service takes the first entry's folder as the job and commits it to its git repository), holding the files
an image's code layer holds (source/job_files.py: no secrets, no caches, .gitignore and .vdkignore honoured) and
the job's own provenance (source/audit.py's UPLOADED_PROVENANCE), which the service's git commit would lose.

The same files give the same bytes (fixed times and order), so that an unchanged job keeps its version there.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import scan_job_dir

_TIME = (1980, 1, 1, 0, 0, 0)  # zip's earliest: the archive of the same files is the same bytes


def sources_zip(job_dir: Path, job_name: str, provenance: audit.Provenance) -> bytes:
    """The archive `vdk deploy` uploads for `job_name` (the folder the service keeps the job in)."""
    files = scan_job_dir(job_dir)
    if any(f.path == audit.UPLOADED_PROVENANCE for f in files.files):
        raise MLTrainingError(
            f"{job_dir} has a file {audit.UPLOADED_PROVENANCE}: a deploy through the Control Service writes it",
            f"delete it (a downloaded copy of a deployed job has it), or add it to {job_dir}/.vdkignore",
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files.files:
            source = f.source.resolve() if f.link is not None else f.source  # a link goes as what it points at
            try:
                data = source.read_bytes()
            except OSError as e:
                raise MLTrainingError(
                    f"cannot read {f.source} to upload it: {e.strerror}",
                    f"make it readable, or leave it out of the job with a line `{f.path}` in {job_dir}/.vdkignore",
                ) from None
            _add(archive, f"{job_name}/{f.path}", data, executable=f.executable)
        _add(archive, f"{job_name}/{audit.UPLOADED_PROVENANCE}", audit.uploaded_provenance(provenance))
    return buffer.getvalue()


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    archive.writestr(info, data)
