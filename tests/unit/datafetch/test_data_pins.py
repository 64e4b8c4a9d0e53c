"""The pins a deploy writes and a pod, the record and `vdk diff` read: fingerprints independent of listing
order, cache keys that change with the content and only with it, the manifest lines pods report."""

import pytest

from vdk.plugin.ml_training.datafetch.data_pins import ClaimManifest
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import decode_pins
from vdk.plugin.ml_training.datafetch.data_pins import encode_pins
from vdk.plugin.ml_training.datafetch.data_pins import fingerprint
from vdk.plugin.ml_training.datafetch.data_pins import parse_manifests
from vdk.plugin.ml_training.datafetch.data_pins import unversioned_source

T = "2026-01-01T00:00:00+00:00"


def test_a_fingerprint_is_of_the_set_not_of_the_order():
    assert fingerprint(["a\t1", "b\t2"]) == fingerprint(["b\t2", "a\t1"])
    assert fingerprint(["a\t1", "b\t2"]) != fingerprint(["a\t1", "b\t3"])


def test_the_cache_key_changes_with_the_content_and_not_with_the_branch_that_named_it():
    main = DataPin("data/tok", "hf://datasets/org/tok@main", "c" * 40, "c" * 40, True)
    tag = DataPin("other", "hf://datasets/org/tok@v1", "c" * 40, "c" * 40, True)
    newer = DataPin("data/tok", "hf://datasets/org/tok@main", "d" * 40, "d" * 40, True)
    assert main.cache_key == tag.cache_key != newer.cache_key
    assert unversioned_source("hf://datasets/org/tok@main") == "hf://datasets/org/tok"
    s3 = DataPin("d", "s3://b/p", None, "f" * 64, False)
    assert s3.cache_key.startswith("s3-") and s3.cache_key != DataPin("d", "s3://b/q", None, "f" * 64).cache_key
    assert DataPin("d", "s3://b/p").cache_key.startswith("unresolved-") and not DataPin("d", "s3://b/p").resolved


def test_pins_survive_the_wire_and_compare_by_content():
    pins = [
        DataPin(
            "data/train",
            "s3://b/p",
            "as of 2026-01-01T00:00:00+00:00",
            "f" * 64,
            True,
            "2026-01-01T00:00:00+00:00",
            3,
            30,
        ),
        DataPin("/data", "pvc:imagenet", manifest={"files": 2, "bytes": 9, "sha256": "a" * 64, "partial": False}),
    ]
    assert decode_pins(encode_pins(pins)) == pins
    assert pins[0].same_version(pins[0]) and not pins[0].same_version(DataPin("data/train", "s3://b/p", None, "e" * 64))
    assert pins[1].same_version(pins[1]) and DataPin("/data", "pvc:imagenet").same_version(pins[1]) is None
    with pytest.raises(ValueError):
        decode_pins('{"not": "a list"}')


def test_versions_read_as_people_say_them():
    assert DataPin("t", "hf://org/m", "c" * 40, "c" * 40, True).describe_version() == "commit " + "c" * 40
    versioned = DataPin("t", "s3://b/p", "x", "f" * 64, True, "2026-01-01T00:00:00+00:00", 3, 3_000_000)
    assert (
        versioned.describe_version()
        == "object versions as of 2026-01-01T00:00:00+00:00 (3 objects, 3.0 MB, list ffffffffffff)"
    )
    assert (
        "the bucket is not versioned" in DataPin("t", "s3://b/p", None, "f" * 64, False, None, 1, 1).describe_version()
    )
    assert DataPin("t", "pvc:x").describe_version().startswith("not versioned")


def test_a_claim_manifest_line_is_read_back():
    line = ClaimManifest("/data/my set", 3, 120, "a" * 64, partial=True).line()
    other = ClaimManifest("/corpus", 1, 5, "b" * 64).line()
    found = parse_manifests(["noise", f"2026-01-01 {line}", other])
    assert found == {
        "/data/my set": {"files": 3, "bytes": 120, "sha256": "a" * 64, "partial": True},
        "/corpus": {"files": 1, "bytes": 5, "sha256": "b" * 64, "partial": False},
    }
