"""What a file's content says about it (source/content_scan.py): a key anywhere in it, found once; a big
file's verdict remembered until the file changes."""

from __future__ import annotations

import base64
import bz2
import gzip
import lzma
import os
import zipfile

import pytest

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


# --- in any common encoding or compression; tokens in small files; a bomb costs no more -----------------------

HF = "hf_" + "AbCdEf0123" * 4


def found(path, data: bytes) -> str | None:
    path.write_bytes(data)
    return content_scan.secret_content(path, path.stat().st_size)


ENCODED_CREDENTIALS = [
    ("key-utf16.pem.txt", KEY.decode().encode("utf-16"), "private key (PEM content, UTF-16)"),
    ("key-utf16be.txt", KEY.decode().encode("utf-16-be"), "private key (PEM content, UTF-16)"),
    ("key-utf32.txt", KEY.decode().encode("utf-32"), "private key (PEM content, UTF-32)"),
    ("key.gz", gzip.compress(b"x" * 3_000_000 + KEY, mtime=0), "private key (PEM content, gzip-compressed)"),
    ("key.bz2", bz2.compress(KEY), "private key (PEM content, bzip2-compressed)"),
    ("key.xz", lzma.compress(KEY), "private key (PEM content, xz-compressed)"),
    ("secret.yaml.txt", b"data:\n  tls.key: " + base64.b64encode(KEY) + b"\n", "private key (PEM content, base64)"),
    ("wrapped.b64", base64.encodebytes(KEY), "private key (PEM content, base64)"),
    ("notes.txt", f"hub token: {HF}\n".encode(), "a Hugging Face token (in its content)"),
    ("notes16.txt", f"hub token: {HF}\n".encode("utf-16"), "a Hugging Face token (in its content, UTF-16)"),
    (
        "notes.txt.gz",
        gzip.compress(f"x = '{HF}'".encode(), mtime=0),
        "a Hugging Face token (in its content, gzip-compressed)",
    ),
    (
        "db.py",
        b"URL = 'postgres://ml:hunter2@db.example.com/runs'\n",
        "a password in a URL (user:password@) (in its content)",
    ),
]


# each case named by its file: the compressed bytes would make long ids (gzip's are the same each time: mtime=0)
@pytest.mark.parametrize(
    ("name", "data", "verdict"), ENCODED_CREDENTIALS, ids=[name for name, _, _ in ENCODED_CREDENTIALS]
)
def test_a_credential_is_found_in_any_common_encoding_or_compression(tmp_path, name, data, verdict):
    assert found(tmp_path / name, data) == verdict


def test_a_key_in_a_compressed_member_of_a_zip_is_found(tmp_path):
    path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("readme.txt", "nothing here " * 100)
        archive.writestr("keys/id.txt", KEY)
    assert content_scan.secret_content(path, path.stat().st_size) == "private key (PEM content, zip-compressed)"


@pytest.mark.parametrize(
    "data",
    [
        b"import torch\nURL = f'{scheme}://{user}:{password}@{host}'\nprint('see https://ada@example.com')\n",
        b"mailto:ada@example.com task-queue desk-lamp AKIA-not-a-key\n",
        "plain text written as UTF-16 by a Windows editor\n".encode("utf-16"),
    ],
)
def test_code_and_text_that_only_look_alike_are_no_secret(tmp_path, data):
    assert found(tmp_path / "clean.txt", data) is None


def test_a_compression_bomb_is_read_only_up_to_its_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(content_scan, "EXPANDED_BYTES", 4 << 20)
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(b"\0" * (64 << 20) + KEY))  # the key lies beyond what is read
    read = []
    real = content_scan._search
    monkeypatch.setattr(
        content_scan, "_search", lambda chunks, *a: real((read.append(len(c)) or c for c in chunks), *a)
    )
    assert content_scan.secret_content(path, path.stat().st_size) is None
    assert sum(read[1:]) <= 4 << 20  # the first search is of the file as it is; the rest of what it expands to
