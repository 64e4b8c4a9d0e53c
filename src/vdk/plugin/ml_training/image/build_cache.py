"""How the builder keeps what it worked out once (dependency layers, what base images hold) below the cache root
(vocabulary/local_cache.py, shared with local runs)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a part (several builds may run at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException as e:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a write's error names no file: this one
            raise OSError(e.errno, e.strerror, temporary) from e
        raise
