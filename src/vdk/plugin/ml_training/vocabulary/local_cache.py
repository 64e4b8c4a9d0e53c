"""Where vdk keeps, on this machine, what it builds or reads once and uses again: dependency layers and
overlays, base facts, sweep requirements, data samples (image/, local/, ops/), and what the job files' content
scan found (source/content_scan.py). Standard library only."""

from __future__ import annotations

import os
from pathlib import Path

from vdk.plugin.ml_training.vocabulary.wire import PROJECT

CACHE_DIR = "VDK_ML_TRAINING_CACHE_DIR"  # another directory instead (a disk with room, a test's)


def cache_root() -> Path:
    """$VDK_ML_TRAINING_CACHE_DIR, else $XDG_CACHE_HOME/vdk-ml-training, else ~/.cache/vdk-ml-training."""
    explicit = os.environ.get(CACHE_DIR)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg if xdg else Path.home() / ".cache") / PROJECT
