"""The job's files as a deploy through the Control Service uploads them (control_service/upload.py): one folder,
named as the job, holding what the image's code layer holds and the job's own provenance; the same files give the
same bytes (an unchanged job keeps its version in the service's repository)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.control_service.upload import sources_zip
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.source.audit import UPLOADED_PROVENANCE
from vdk.plugin.ml_training.source.audit import Provenance

PROVENANCE = Provenance(
    "a" * 40, True, "b" * 64, "https://git.example.com/ml.git", "ada@example.com", "2025-01-01T00:00:00Z"
)


def test_one_folder_named_as_the_job_with_the_code_layers_files_and_the_jobs_provenance(tmp_path):
    job = write_job(tmp_path, "my-dir", files={"train.py": "print(1)\n", "lib/util.py": "x = 1\n", ".env": "K=v\n",
                                               "svc.keytab": "secret", "__pycache__/a.pyc": "x"})  # fmt: skip
    archive = zipfile.ZipFile(io.BytesIO(sources_zip(job, "mnist-ddp", PROVENANCE)))
    names = archive.namelist()
    assert {name.split("/", 1)[0] for name in names} == {"mnist-ddp"}
    assert sorted(names) == sorted(
        ["mnist-ddp/config.ini", "mnist-ddp/lib/util.py", "mnist-ddp/train.py", f"mnist-ddp/{UPLOADED_PROVENANCE}"]
    )
    recorded = json.loads(archive.read(f"mnist-ddp/{UPLOADED_PROVENANCE}"))
    assert recorded == {"git_commit": "a" * 40, "git_dirty": True, "git_diff_sha256": "b" * 64,
                        "git_remote": "https://git.example.com/ml.git", "deployer": "ada@example.com"}  # fmt: skip


def test_the_same_files_are_the_same_bytes_whenever_they_are_deployed(tmp_path):
    job = write_job(tmp_path, "my-job")
    later = Provenance(*PROVENANCE.__dict__.values())
    object.__setattr__(later, "created", "2030-06-01T12:00:00Z")
    before = sources_zip(job, "my-job-x", PROVENANCE)
    assert before == sources_zip(job, "my-job-x", later)
    (job / "train.py").write_text("print(2)\n")
    assert sources_zip(job, "my-job-x", later) != before


def test_a_job_that_has_the_provenance_file_already_is_refused(tmp_path):
    job = write_job(tmp_path, "my-job", files={"train.py": "", UPLOADED_PROVENANCE: "{}"})
    with pytest.raises(MLTrainingError, match="a deploy through the Control Service writes it"):
        sources_zip(job, "my-job-x", PROVENANCE)
