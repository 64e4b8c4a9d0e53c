"""A file the job directory has but its image leaves out (.gitignore, .vdkignore, the built-in rules): the local run
runs in a copy of what the image holds, so it does not find the file, as the cluster run would not. Whatever
opened it — `open()`, numpy, pandas, torch, h5py, safetensors — the error names the path its own way
(`No such file or directory: 'data/x.npy'`, `data/x.txt not found.`, `name = 'x.h5'`, `os error 2`): every path
the message names is looked up among what the image leaves out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error

# What libraries say when a file is not there (any error type: some raise OSError, ValueError or their own).
_MISSING = re.compile(
    r"No such file|not found|does not exist|doesn't exist|cannot find|can't find|could not find|unable to open|"
    r"os error 2|errno 2",
    re.IGNORECASE,
)
_MISSING_TYPES = ("FileNotFoundError", "NotADirectoryError")
_QUOTED = re.compile(r"""'([^'\n]+)'|"([^"\n]+)"|`([^`\n]+)`""")
_WORD = re.compile(r"[^\s'\"`,;()\[\]{}]+")


def file_left_out(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None:
        return None
    local, _, error = reported
    message = error.get("message", "")
    if local.left_out is None or not (error.get("type") in _MISSING_TYPES or _MISSING.search(message)):
        return None
    job_dir = local.spec.job_dir
    for path in _job_paths(message, job_dir):
        excluded = local.left_out(path.as_posix())
        if excluded is None or not (job_dir / path).exists():
            continue
        return local_failure(
            evidence,
            f"{path} is in the job directory, but its image leaves it out ({excluded.path}: {excluded.reason}), so "
            "the cluster run would not find it either; the smoke run runs in a copy of what the image holds. Read "
            f"data from storage the cluster can reach, or ship the file: {excluded.way_back(job_dir)}. Then "
            f"{local.again}",
        )
    return None


def _job_paths(message: str, job_dir: Path) -> Iterator[Path]:
    """Every path the message names that lies in the job directory, relative to it: quoted ones first, then words."""
    quoted = [next(group for group in match.groups() if group) for match in _QUOTED.finditer(message)]
    words = [word.rstrip(".:") for word in _WORD.findall(message)]
    seen: set[Path] = set()
    for text in [*quoted, *words]:
        text = text.strip().removeprefix("file://")
        if not text or "/" not in text and "." not in text:
            continue  # "found", "file": no path
        path = Path(text)
        if path.is_absolute():
            if not path.is_relative_to(job_dir):
                continue
            path = path.relative_to(job_dir)
        path = Path(*[part for part in path.parts if part != "."]) if path.parts else path
        if not path.parts or ".." in path.parts or path in seen:
            continue
        seen.add(path)
        yield path
