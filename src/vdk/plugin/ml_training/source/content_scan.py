"""Whether a file's content marks it as a secret: a PEM private key anywhere in it (after the first lines,
indented in a YAML block, in a JSON string, in the middle of a big file), or a cloud service-account key.

Files are read whole, a mebibyte at a time, reads overlapping by more than a key's header so that none is
missed between two of them. What was found in a big file is remembered under its identity (device, inode,
size, modification and change times: any write changes the change time) in the cache directory
($VDK_ML_TRAINING_CACHE_DIR, else $XDG_CACHE_HOME/vdk-ml-training), so that the next command reads only the
files that changed: a gigabyte of data costs half a second to search, a stat() to look up
(benchmarks/job_dir_protection.py)."""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path

from vdk.plugin.ml_training.secret_patterns import PEM_PRIVATE_KEY
from vdk.plugin.ml_training.vocabulary.local_cache import cache_root

CHUNK = 1 << 20
_OVERLAP = 256
_PEM_PRIVATE_KEY = re.compile(PEM_PRIVATE_KEY.encode())
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
_CACHE_FILE = "content-scan.json"
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
    key = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
    known = _cache().get(key)
    if known is not None:
        return known or None
    verdict = _scan(path)
    _remember(key, verdict or "")
    return verdict


def _scan(path: Path) -> str | None:
    tail = b""
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                window = tail + chunk
                if b"PRIVATE KEY-----" in window and _PEM_PRIVATE_KEY.search(window):
                    return "private key (PEM content)"
                if path.suffix == ".json" and _SERVICE_ACCOUNT.search(window) and b'"private_key"' in window:
                    return "cloud service-account key"
                tail = window[-_OVERLAP:]
    except OSError:
        return None
    return None


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
