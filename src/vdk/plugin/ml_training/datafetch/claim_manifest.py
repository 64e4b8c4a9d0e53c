"""The manifest of a mounted PersistentVolumeClaim (or a directory of it): every file's path, size and mtime,
hashed. Claims are not versioned: this is what a run can say of the data it saw, computed in each pod at start
and reported as a line (data_pins.ClaimManifest) that `vdk` reads back. Standard library only."""

from __future__ import annotations

import os
import stat

from vdk.plugin.ml_training.datafetch.data_pins import ClaimManifest
from vdk.plugin.ml_training.datafetch.data_pins import fingerprint

MAX_FILES = 200_000  # a manifest of more (a slow network volume) is of the first ones, marked partial


def claim_manifest(target: str, directory: str, max_files: int = MAX_FILES) -> ClaimManifest:
    lines: list[str] = []
    size = 0
    partial = False
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if len(lines) >= max_files:
                partial = True
                break
            relative = os.path.relpath(path, directory).replace(os.sep, "/")
            lines.append(f"{relative}\t{info.st_size}\t{int(info.st_mtime)}")
            size += info.st_size
        if partial:
            break
    return ClaimManifest(target, len(lines), size, fingerprint(lines), partial, tuple(lines))
