"""A file the job directory has but its image leaves out (.vdkignore, the built-in rules): the local run
runs in a copy of what the image holds, so it does not find the file, as the cluster run would not."""

from __future__ import annotations

import re
from pathlib import Path

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error

_NO_FILE = re.compile(r"No such file or directory: '([^']+)'")


def file_left_out(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None:
        return None
    local, _, error = reported
    missing = _NO_FILE.search(error.get("message", ""))
    job_dir = local.spec.job_dir
    if not missing or local.left_out is None:
        return None
    path = Path(missing.group(1))
    if path.is_absolute():
        if not path.is_relative_to(job_dir):
            return None
        path = path.relative_to(job_dir)
    excluded = local.left_out(path.as_posix())
    if excluded is None or not (job_dir / path).exists():
        return None
    return local_failure(
        evidence,
        f"{path} is in the job directory, but its image leaves it out ({excluded.path}: {excluded.reason}), so the "
        "cluster run would not find it either; the smoke run runs in a copy of what the image holds. Read data "
        f"from storage the cluster can reach, or ship the file: add `!{excluded.path}` to {job_dir / '.vdkignore'}. "
        f"Then {local.again}",
    )
