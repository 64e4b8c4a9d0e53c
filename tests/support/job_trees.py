"""Job directories written file by file, and what the scan of one (source/job_files.py) keeps and leaves out."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.source.job_files import scan_job_dir

# A private key's content: excluded under any file name.
PEM_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def write(root: Path, relpath: str, content: str | bytes = "x\n", mode: int | None = None) -> Path:
    """`root/relpath` with `content` (and `mode`), its directories made as needed."""
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    if mode is not None:
        path.chmod(mode)
    return path


def scanned(job: Path) -> tuple[list[str], dict[str, str]]:
    """The paths the scan of `job` keeps, and those it leaves out -> why."""
    result = scan_job_dir(job)
    return [f.path for f in result.files], {e.path: e.reason for e in result.excluded}
