"""The provenance a deploy through the Control Service uploads with the job's files (source/audit.py): written
without a time (the same code, the same bytes), read back by the builder and the launcher as the job's, with their
time; a file that is not one is ignored."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.source.audit import UPLOADED_PROVENANCE
from vdk.plugin.ml_training.source.audit import Provenance
from vdk.plugin.ml_training.source.audit import read_uploaded
from vdk.plugin.ml_training.source.audit import uploaded_provenance

DEPLOYED = Provenance(
    "a" * 40, True, "d" * 64, "https://git.example.com/ml.git", "ada@example.com", "2025-01-01T00:00:00Z"
)
NOW = datetime(2025, 5, 13, 10, 0, 0, tzinfo=timezone.utc)


def test_the_uploaded_provenance_is_read_back_as_the_jobs_with_the_readers_time(tmp_path):
    (tmp_path / UPLOADED_PROVENANCE).write_bytes(uploaded_provenance(DEPLOYED))
    assert b"created" not in uploaded_provenance(DEPLOYED)
    read = read_uploaded(tmp_path, now=NOW)
    assert read == Provenance("a" * 40, True, "d" * 64, "https://git.example.com/ml.git", "ada@example.com",
                              "2025-05-13T10:00:00Z")  # fmt: skip


def test_no_file_or_another_file_is_no_uploaded_provenance(tmp_path):
    assert read_uploaded(tmp_path) is None
    (tmp_path / UPLOADED_PROVENANCE).write_text("[1, 2]")
    assert read_uploaded(tmp_path) is None
    (tmp_path / UPLOADED_PROVENANCE).write_text("not json")
    assert read_uploaded(tmp_path) is None
