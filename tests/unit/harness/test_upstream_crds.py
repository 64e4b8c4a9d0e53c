"""Where the upstream CRDs the schema tests need are looked for: the configured folder first; the first
place that has a file wins and its file must match the pin; when they cannot be had, the tests that
need them skip with one reason instead of an error; the pins are the CRDs those tests read.
(Downloading them: tests/integration/harness/test_upstream_crds_download.py.)"""

import pytest

from tests.support import crd_schema
from tests.support import upstream_crds
from tests.support.made_up_crds import PINS
from tests.support.made_up_crds import A
from tests.support.made_up_crds import B
from tests.support.upstream_crds import CRDChecksumMismatch
from tests.support.upstream_crds import CRDUnavailable


def test_the_first_place_that_has_a_file_wins_and_every_place_is_checked(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    second.mkdir()
    (second / "a.yaml").write_bytes(A)
    assert upstream_crds.locate(PINS[0], [first, second]) == second / "a.yaml"
    first.mkdir()
    (first / "a.yaml").write_bytes(B)
    with pytest.raises(CRDChecksumMismatch, match=r"first/a.yaml is not the pinned upstream a.yaml"):
        upstream_crds.locate(PINS[0], [first, second])
    with pytest.raises(CRDUnavailable):
        upstream_crds.locate(PINS[1], [first, second])


def test_the_configured_folder_comes_first(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream_crds.CRD_DIR_ENV, str(tmp_path / "mine"))
    assert upstream_crds.places(tmp_path / "cache") == [
        tmp_path / "mine",
        upstream_crds.SHARED_DIR,
        tmp_path / "cache",
    ]
    monkeypatch.delenv(upstream_crds.CRD_DIR_ENV)
    assert upstream_crds.places(tmp_path / "cache") == [upstream_crds.SHARED_DIR, tmp_path / "cache"]


def test_without_the_crds_the_tests_that_need_them_skip_with_one_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream_crds.CRD_DIR_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(upstream_crds, "SHARED_DIR", tmp_path / "no-shared")
    monkeypatch.setattr(upstream_crds, "CACHE_DIR", tmp_path / "no-cache")
    crd_schema.load_crd.cache_clear()
    try:
        reasons = set()
        for filename in (crd_schema.PYTORCHJOB_CRD, crd_schema.TRAINJOB_CRD):
            with pytest.raises(pytest.skip.Exception) as skipped:
                crd_schema.load_crd(filename)
            reasons.add(str(skipped.value))
        assert reasons == {upstream_crds.UNAVAILABLE}
        assert "make test" in upstream_crds.UNAVAILABLE and upstream_crds.CRD_DIR_ENV in upstream_crds.UNAVAILABLE
    finally:
        crd_schema.load_crd.cache_clear()


def test_the_pins_are_the_crds_the_schema_tests_read():
    assert set(upstream_crds.PINNED) == {crd_schema.PYTORCHJOB_CRD, crd_schema.TRAINJOB_CRD}
    for pin in upstream_crds.PINS:
        assert pin.url() == f"https://raw.githubusercontent.com/kubeflow/trainer/{pin.tag}/{pin.path}"
        assert len(pin.sha256) == 64
