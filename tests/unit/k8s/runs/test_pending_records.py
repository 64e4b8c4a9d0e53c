"""How old a record is, for k8s/runs/pending_records.py: one whose time cannot be read is never old enough to be
deleted. (Settling the records a command left, against the fake API server: tests/integration/k8s/test_creation.py.)"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from datetime import timezone

from vdk.plugin.ml_training.k8s.runs import pending_records


def stamp(seconds_ago: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_record_s_age_is_read_from_its_creation_timestamp():
    assert 599 <= pending_records._age({"creationTimestamp": stamp(600)}) <= 602


def test_a_record_without_a_readable_time_is_never_old():
    assert pending_records._age({}) == 0.0
    assert pending_records._age({"creationTimestamp": "yesterday"}) == 0.0


def test_the_bound_outlasts_a_create_the_api_server_may_still_be_doing():
    assert pending_records.PENDING_SECONDS >= 60 + 45  # the server's request timeout, the client's retries
