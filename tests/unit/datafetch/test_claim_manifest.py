"""The manifest of a mounted claim: paths, sizes and mtimes hashed; changes when a file does, partial past a cap."""

import os

from vdk.plugin.ml_training.datafetch.claim_manifest import claim_manifest


def test_the_manifest_changes_when_a_file_changes_and_not_otherwise(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"12345")
    (tmp_path / "y.txt").write_text("hi")
    os.symlink(tmp_path / "y.txt", tmp_path / "link")  # links are not files of the claim
    first = claim_manifest("/data", str(tmp_path))
    assert (first.files, first.bytes, first.partial) == (2, 7, False)
    assert claim_manifest("/data", str(tmp_path)).sha256 == first.sha256
    (tmp_path / "y.txt").write_text("hello")
    assert claim_manifest("/data", str(tmp_path)).sha256 != first.sha256


def test_a_manifest_of_more_files_than_it_takes_is_partial(tmp_path):
    for n in range(5):
        (tmp_path / f"f{n}").write_text("x")
    manifest = claim_manifest("/data", str(tmp_path), max_files=3)
    assert (manifest.files, manifest.partial) == (3, True)
