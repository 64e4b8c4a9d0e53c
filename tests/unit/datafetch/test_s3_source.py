"""Which object versions a versioned prefix had at the time it was pinned (the store itself: tests/integration)."""

from datetime import datetime
from datetime import timedelta
from datetime import timezone

from vdk.plugin.ml_training.datafetch.s3_source import S3Object
from vdk.plugin.ml_training.datafetch.s3_source import current_at
from vdk.plugin.ml_training.datafetch.s3_source import location

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def version(key: str, seconds: int, vid: str, marker: bool = False):
    when = T0 + timedelta(seconds=seconds)
    return key, when, marker, None if marker else S3Object(key, 1, f'"{vid}"', vid, when)


def test_the_newest_version_of_each_key_at_the_pinned_time_and_none_deleted_by_then():
    entries = [
        version("a", 0, "a1"),
        version("a", 10, "a2"),
        version("a", 30, "a3"),  # written after the pin: not fetched
        version("b", 5, "b1"),
        version("b", 15, "", marker=True),  # deleted before the pin
        version("c", 25, "", marker=True),  # deleted after the pin: still there then
        version("c", 1, "c1"),
        version("d", 40, "d1"),  # new after the pin
    ]
    pinned = current_at(entries, T0 + timedelta(seconds=20))
    assert [(o.key, o.version_id) for o in pinned] == [("a", "a2"), ("c", "c1")]


def test_a_prefix_is_a_directory():
    assert location("s3://bucket/cifar10/train") == ("bucket", "cifar10/train/")
    assert location("s3://bucket") == ("bucket", "")
