"""The data step's own rules, without a store: a manifest of a dry run is refused with what to do, a version in
the cache is not fetched again, datasets are linked where a pod cannot mount them, claims are reported."""

import pytest

from vdk.plugin.ml_training.datafetch import data_cache
from vdk.plugin.ml_training.datafetch import fetch_step
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.source_errors import NO_SPACE
from vdk.plugin.ml_training.datafetch.source_errors import SourceError

PIN = DataPin("data/train", "s3://bucket/train", None, "f" * 64, False, None, 2, 10)


def test_unresolved_pins_from_a_dry_run_are_refused_with_the_way_to_deploy(tmp_path):
    with pytest.raises(SourceError) as info:
        fetch_step.fetch_all(tmp_path, [DataPin("data/train", "s3://bucket/train")], None, print)
    assert "vdk deploy --dry-run" in info.value.problem and "`vdk deploy`" in info.value.fix


def test_a_version_in_the_cache_is_not_fetched_again(tmp_path, monkeypatch):
    said = []
    data_cache.entry(tmp_path, PIN).mkdir(parents=True)
    data_cache.mark_complete(tmp_path, PIN)
    monkeypatch.setattr(fetch_step.s3_source, "fetch", lambda *a, **k: pytest.fail("fetched again"))
    assert fetch_step.fetch_all(tmp_path, [PIN], "ml-data-cache", said.append) == [data_cache.entry(tmp_path, PIN)]
    assert "in the cache already" in said[0]


def test_a_version_is_fetched_into_its_directory_then_marked_whole(tmp_path, monkeypatch):
    def fake_fetch(pin, dest, progress):
        (dest / "x").write_text("12345")

    monkeypatch.setattr(fetch_step.s3_source, "fetch", fake_fetch)
    fetch_step.fetch_all(tmp_path, [PIN], None, lambda text: None)
    assert (data_cache.entry(tmp_path, PIN) / "x").read_text() == "12345"
    assert data_cache.is_complete(tmp_path, PIN)


def test_a_dataset_larger_than_the_cache_is_refused_before_it_is_fetched(tmp_path, monkeypatch):
    huge = DataPin("data/train", "s3://bucket/train", None, "f" * 64, False, None, 1, 1 << 62)
    monkeypatch.setattr(fetch_step.s3_source, "fetch", lambda *a, **k: pytest.fail("fetched"))
    with pytest.raises(SourceError) as info:
        fetch_step.fetch_all(tmp_path, [huge], "ml-data-cache", lambda text: None)
    assert info.value.kind == NO_SPACE and "the data cache claim ml-data-cache has" in info.value.problem


def test_targets_are_linked_to_their_versions(tmp_path):
    version = tmp_path / "cache" / "v1"
    version.mkdir(parents=True)
    (tmp_path / "work" / "data" / "train").mkdir(parents=True)  # an empty directory (a mount point) is replaced
    fetch_step.link_targets([(str(tmp_path / "work" / "data" / "train"), str(version))])
    assert (tmp_path / "work" / "data" / "train").resolve() == version
    (tmp_path / "work" / "code.py").write_text("x")
    with pytest.raises(SourceError, match="is in the way"):
        fetch_step.link_targets([(str(tmp_path / "work" / "code.py"), str(version))])


def test_claims_are_reported_as_manifest_lines(tmp_path):
    (tmp_path / "f").write_text("abc")
    said = []
    (manifest,) = fetch_step.report_claims([("/data", str(tmp_path))], said.append)
    assert said == [manifest.line()] and manifest.files == 1


def test_what_the_command_tells_is_read_back_by_its_own_readers():
    error = SourceError("the bucket is gone", "create it, then deploy again", NO_SPACE, "data/train")
    message = f"{fetch_step.PREFIX}: fetching\n{fetch_step.failure_line(error)}"
    assert fetch_step.parse_failure(message) == ("data/train: the bucket is gone", "create it, then deploy again")
    assert fetch_step.parse_failure("[vdk-ml-training] data data/train: fetched") is None
    answer = fetch_step.answer_error(__import__("json").loads(fetch_step.error_answer(error)))
    assert answer.to_dict() == error.to_dict() and fetch_step.answer_error([{"target": "x"}]) is None
    line = fetch_step.progress_line("data/train", 1, 5, PIN)
    assert fetch_step.parse_progress_line(line) == {
        "target": "data/train",
        "files": 1,
        "bytes": 5,
        "total_files": PIN.files,
        "total_bytes": PIN.bytes,
    }
    assert fetch_step.parse_progress_line("Downloading boto3") is None
