"""Where the builder keeps what it worked out once: dependency layers and what base images hold."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """$VDK_ML_TRAINING_CACHE_DIR, else $XDG_CACHE_HOME/vdk-ml-training, else ~/.cache/vdk-ml-training."""
    explicit = os.environ.get("VDK_ML_TRAINING_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg if xdg else Path.home() / ".cache") / "vdk-ml-training"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a part (several builds may run at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
