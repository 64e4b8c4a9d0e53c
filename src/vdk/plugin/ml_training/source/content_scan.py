"""Whether a file's content marks it as a secret: a PEM private key anywhere in it (after the first lines,
indented in a YAML block, in a JSON string, in the middle of a big file, base64-encoded as a Kubernetes Secret
holds it), a cloud service-account key, or — in a file of up to TOKEN_SCAN_BYTES — a token of a documented format
or a URL with a password (secret_patterns.py). The content is read as it is, as UTF-16 or UTF-32 (what Windows
tools write) and, for a gzip, bzip2, xz or zip file, uncompressed (up to EXPANDED_BYTES of it: a bomb costs no
more).

Files are read whole, a mebibyte at a time, reads overlapping by more than a key's header so that none is
missed between two of them. What was found in a big file is remembered under its identity (device, inode,
size, modification and change times: any write changes the change time) in the cache directory
($VDK_ML_TRAINING_CACHE_DIR, else $XDG_CACHE_HOME/vdk-ml-training), so that the next command reads only the
files that changed: a gigabyte of data costs half a second to search, a stat() to look up
(benchmarks/job_dir_protection.py)."""

from __future__ import annotations

import base64
import binascii
import bz2
import json
import lzma
import os
import re
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from vdk.plugin.ml_training.secret_patterns import PEM_PRIVATE_KEY
from vdk.plugin.ml_training.secret_patterns import TOKEN_FORMATS
from vdk.plugin.ml_training.secret_patterns import url_credentials
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

CHUNK = 1 << 20
TOKEN_SCAN_BYTES = 2 << 20  # tokens are looked for in files of up to this size (code, configuration, notes)
EXPANDED_BYTES = 64 << 20  # at most this much of a compressed file is uncompressed and read
_OVERLAP = 256
_PEM_PRIVATE_KEY = re.compile(PEM_PRIVATE_KEY.encode())
_PEM_MARK = b"PRIVATE KEY-----"
_BASE64_BEGIN = b"LS0tLS1CRUdJTi"  # "-----BEGIN" in base64, as a Secret's data or `base64 key.pem` has it
_BASE64_RUN = re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/=\r\n]{40,120}")
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
# What every documented token format (secret_patterns.py) and a credential URL start with: found with a plain
# search (fast whatever the content), each place then read by secret_patterns.py's own rules.
_TOKEN_STARTS = (b"hf_", b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"glpat-", b"AKIA", b"ASIA",
                 b"sk-", b"xox", b"AIza", b"eyJ", b"npm_", b"pypi-", b"://")  # fmt: skip
_FORMATS = [(kind, re.compile(pattern.pattern.encode())) for kind, pattern in TOKEN_FORMATS.items()]
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PK\x03\x04", "zip"),
)
_CACHE_FILE = "content-scan.json"
_CACHE_VERSION = "2"  # what the scan looks for: a verdict of an older scan is not trusted
_CACHE_ENTRIES = 20_000
_lock = threading.Lock()
_remembered: dict[str, str] | None = None


def secret_content(path: Path, size: int) -> str | None:
    """Why the content of `path` (`size` bytes) marks it as a secret, or None (also when it cannot be read:
    whoever reads it next reports that)."""
    if size == 0:
        return None
    if size <= CHUNK:
        return _scan(path)
    try:
        info = os.stat(path)
    except OSError:
        return None
    key = f"{_CACHE_VERSION}:{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
    known = _cache().get(key)
    if known is not None:
        return known or None
    verdict = _scan(path)
    _remember(key, verdict or "")
    return verdict


def _scan(path: Path) -> str | None:
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(4096)
            f.seek(0)
            verdict = _search(_chunks(f), path.suffix == ".json", TOKEN_SCAN_BYTES if size <= TOKEN_SCAN_BYTES else 0)
            if verdict:
                return verdict
        compression = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
        if compression is not None:
            found = _search_compressed(path, compression)
            return f"{found[:-1]}, {compression}-compressed)" if found else None
    except (OSError, EOFError):
        return None
    return None


def _chunks(f) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def _search(chunks: Iterator[bytes], json_file: bool, tokens: int) -> str | None:
    """What the stream of `chunks` holds that makes it a secret; tokens and credential URLs are looked for in its
    first `tokens` bytes (a small file: a big one is data). Text written as UTF-16 or UTF-32 (found from its
    first bytes) is read through its ASCII bytes."""
    tail = b""
    offset = 0  # of the window's first byte in the stream
    wide: tuple[int, int, str] | None = None
    for chunk in chunks:
        if offset == 0:
            wide = _width(chunk[:4096])
        window = tail + chunk
        view, how = window, ""
        if wide is not None:
            unit, phase, how = wide
            view, how = window[(phase - offset) % unit :: unit], f", {how}"
        if _PEM_MARK in view and _PEM_PRIVATE_KEY.search(view):
            return f"private key (PEM content{how})"
        if _BASE64_BEGIN in view and _base64_key(view):
            return f"private key (PEM content, base64{how})"
        if json_file and _SERVICE_ACCOUNT.search(view) and b'"private_key"' in view:
            return "cloud service-account key"
        if offset < tokens:
            found = _token(view)
            if found:
                return f"{found} (in its content{how})"
        tail = window[-_OVERLAP:]
        offset += len(window) - len(tail)
    return None


def _width(head: bytes) -> tuple[int, int, str] | None:
    """(bytes per character, where its ASCII byte is, the encoding) of text written as UTF-32 or UTF-16 (by its
    byte-order mark, or every other byte zero), else None."""
    for bom, found in ((b"\xff\xfe\x00\x00", (4, 0, "UTF-32")), (b"\x00\x00\xfe\xff", (4, 3, "UTF-32")),
                       (b"\xff\xfe", (2, 0, "UTF-16")), (b"\xfe\xff", (2, 1, "UTF-16"))):  # fmt: skip
        if head.startswith(bom):
            return found
    if len(head) < 16:
        return None
    for unit, name in ((4, "UTF-32"), (2, "UTF-16")):
        lanes = [head[i::unit].count(0) / len(head[i::unit]) for i in range(unit)]
        text = [i for i, zeros in enumerate(lanes) if zeros < 0.1]
        if len(text) == 1 and all(zeros > 0.4 for i, zeros in enumerate(lanes) if i != text[0]):
            return unit, text[0], name
    return None


def _base64_key(window: bytes) -> bool:
    for match in _BASE64_RUN.finditer(window):
        text = re.sub(rb"\s", b"", match.group())
        text = text[: len(text) // 4 * 4]
        try:
            decoded = base64.b64decode(text)
        except (binascii.Error, ValueError):
            continue
        if _PEM_MARK in decoded or b"PRIVATE KEY" in decoded:
            return True
    return False


def _token(view: bytes) -> str | None:
    """What kind of token or credential URL `view` holds (secret_patterns.py's rules, read where one of the
    starts of a token is), or None."""
    for start in _TOKEN_STARTS:
        at = view.find(start)
        while at >= 0:
            if start == b"://":
                left = max(view.rfind(c, max(0, at - 40), at) for c in b" \t\n\"'<(=,;") + 1
                word = view[left : at + 300].split(None, 1)[0] if view[left : at + 300].strip() else b""
                if b"@" in word and url_credentials(word.decode("latin-1")):
                    return url_credentials(word.decode("latin-1"))
            else:
                for kind, pattern in _FORMATS:
                    if pattern.match(view, at):
                        return kind
            at = view.find(start, at + 1)
    return None


def _search_compressed(path: Path, compression: str) -> str | None:
    if compression == "zip":
        return _search_zip(path)
    opener = {"gzip": _gunzip, "bzip2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}[compression]
    return _search(_expanded(path, opener()), False, TOKEN_SCAN_BYTES)


def _gunzip():
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


def _expanded(path: Path, decompressor) -> Iterator[bytes]:
    """The uncompressed content, as it comes, at most EXPANDED_BYTES of it; a damaged stream ends it."""
    produced = 0
    with open(path, "rb") as f:
        data = f.read(CHUNK)
        while produced < EXPANDED_BYTES:
            try:
                out = decompressor.decompress(data, min(CHUNK, EXPANDED_BYTES - produced))
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
                return
            if out:
                produced += len(out)
                yield out
            if getattr(decompressor, "eof", False):
                return
            pending = getattr(decompressor, "unconsumed_tail", b"")  # zlib: input held back by the limit
            if pending:
                data = pending
            elif out and not getattr(decompressor, "needs_input", True):  # bz2, xz: output held back
                data = b""
            else:
                data = f.read(CHUNK)
                if not data:
                    return


def _search_zip(path: Path) -> str | None:
    """The compressed members of a zip (stored ones were read as they are), up to EXPANDED_BYTES in all."""
    left = EXPANDED_BYTES
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if member.is_dir() or member.compress_type == zipfile.ZIP_STORED or left <= 0:
                    continue
                with archive.open(member) as f:
                    found = _search(_limited(f, left), member.filename.endswith(".json"), TOKEN_SCAN_BYTES)
                left -= member.file_size
                if found:
                    return found
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error):
        return None
    return None


def _limited(f, limit: int) -> Iterator[bytes]:
    while limit > 0 and (chunk := f.read(min(CHUNK, limit))):
        limit -= len(chunk)
        yield chunk


def _cache_path() -> Path:
    return cache_root() / _CACHE_FILE


def _cache() -> dict[str, str]:
    global _remembered
    with _lock:
        if _remembered is None:
            try:
                loaded = json.loads(_cache_path().read_text(encoding="utf-8"))
                _remembered = {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                _remembered = {}
        return _remembered


def _remember(key: str, verdict: str) -> None:
    entries = _cache()
    with _lock:
        entries[key] = verdict
        kept = dict(list(entries.items())[-_CACHE_ENTRIES:])
    path = _cache_path()
    try:  # the next command reads it whole or not at all
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(kept, f)
        os.replace(temporary, path)
    except OSError:
        pass  # a cache that cannot be written costs a scan next time, nothing else
