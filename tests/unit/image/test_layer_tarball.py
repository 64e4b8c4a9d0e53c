"""Layer tarballs are byte-for-byte reproducible, whatever the files' times, owners and modes."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile

import pytest

from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.source.job_files import scan_job_dir


def make_tree(root, mtime, umask_mode):
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "ünïcode.py").write_text("B = 2\n")
    (root / ("long_" + "x" * 120 + ".txt")).write_text("long name\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o700)
    (root / "link.py").symlink_to("train.py")
    for path in root.rglob("*"):
        if not path.is_symlink():
            if path.is_file() and path.name != "run.sh":
                path.chmod(umask_mode)
            os.utime(path, (mtime, mtime))


def test_same_tree_gives_same_bytes_whatever_the_metadata(tmp_path):
    make_tree(tmp_path / "one", mtime=1_000_000, umask_mode=0o644)
    make_tree(tmp_path / "two", mtime=1_700_000_000, umask_mode=0o664)
    a = layer_tarball.write_layer("/opt/vdk-ml/job", scan_job_dir(tmp_path / "one").files, tmp_path / "out1")
    b = layer_tarball.write_layer("/opt/vdk-ml/job", scan_job_dir(tmp_path / "two").files, tmp_path / "out2")
    assert a.digest == b.digest and a.diff_id == b.diff_id and a.size == b.size
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.digest == "sha256:" + hashlib.sha256(a.path.read_bytes()).hexdigest()
    assert a.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(a.path.read_bytes())).hexdigest()
    # The dry run's diff_id (no compression, nothing stored) is the same as the build's.
    assert layer_tarball.diff_id("/opt/vdk-ml/job", scan_job_dir(tmp_path / "one").files) == a.diff_id


def test_entries_are_sorted_root_owned_and_fixed_in_time(tmp_path):
    make_tree(tmp_path / "job", mtime=1_700_000_000, umask_mode=0o600)
    blob = layer_tarball.write_layer("/opt/vdk-ml/job", scan_job_dir(tmp_path / "job").files, tmp_path / "out")
    raw = blob.path.read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00"  # gzip header MTIME field
    with tarfile.open(blob.path) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[:3] == ["opt", "opt/vdk-ml", "opt/vdk-ml/job"]
    assert names == sorted(names, key=lambda n: n.encode())
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", layer_tarball.FIXED_MTIME)
    modes = {m.name.rpartition("/")[2]: (m.type, m.mode) for m in members}
    assert modes["train.py"] == (tarfile.REGTYPE, 0o644)  # 0600 on disk: readable in the image
    assert modes["run.sh"] == (tarfile.REGTYPE, 0o755)
    assert modes["pkg"] == (tarfile.DIRTYPE, 0o755)
    assert modes["link.py"][0] == tarfile.SYMTYPE
    assert "opt/vdk-ml/job/pkg/ünïcode.py" in names
    assert any(n.endswith("x" * 120 + ".txt") for n in names)


def test_a_changed_byte_changes_the_digest(tmp_path):
    make_tree(tmp_path / "job", mtime=1, umask_mode=0o644)
    before = layer_tarball.write_layer("/opt/vdk-ml/job", scan_job_dir(tmp_path / "job").files, tmp_path / "out")
    (tmp_path / "job" / "pkg" / "a.py").write_text("A = 2\n")
    after = layer_tarball.write_layer("/opt/vdk-ml/job", scan_job_dir(tmp_path / "job").files, tmp_path / "out")
    assert before.digest != after.digest and before.diff_id != after.diff_id


def test_a_failed_write_leaves_no_file(tmp_path):
    make_tree(tmp_path / "job", mtime=1, umask_mode=0o644)
    files = scan_job_dir(tmp_path / "job").files
    (tmp_path / "job" / "train.py").write_text("grown since the scan\n")
    out = tmp_path / "out"
    with pytest.raises(ImageBuildError, match="changed while the image was being built"):
        layer_tarball.write_layer("/opt/vdk-ml/job", files, out)
    assert list(out.iterdir()) == []
    shutil.rmtree(out)
