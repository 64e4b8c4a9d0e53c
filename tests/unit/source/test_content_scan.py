"""What a file's content says about it (source/content_scan.py): a key anywhere in it, found once; a big
file's verdict remembered until the file changes."""

from __future__ import annotations

import os

from vdk.plugin.ml_training.source import content_scan

KEY = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"


def test_a_key_across_two_reads_is_found(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"_" * (content_scan.CHUNK - 10) + KEY + b"_" * 100)
    assert content_scan.secret_content(path, path.stat().st_size) == "private key (PEM content)"


def test_a_big_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(content_scan, "_remembered", None)
    path = tmp_path / "data.bin"
    path.write_bytes(b"\0" * (3 * content_scan.CHUNK))
    reads = []
    real = content_scan._scan
    monkeypatch.setattr(content_scan, "_scan", lambda p: reads.append(p) or real(p))
    assert content_scan.secret_content(path, path.stat().st_size) is None
    monkeypatch.setattr(content_scan, "_remembered", None)  # the next command: from the cache file
    assert content_scan.secret_content(path, path.stat().st_size) is None
    assert len(reads) == 1
    with open(path, "r+b") as f:  # a key written in place, size and even mtime kept: the change time moves
        stat = os.stat(path)
        f.seek(content_scan.CHUNK)
        f.write(KEY)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert content_scan.secret_content(path, path.stat().st_size) == "private key (PEM content)"
    assert len(reads) == 2
