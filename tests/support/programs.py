"""Stand-in programs on a PATH of their own: which commands a machine has, without the real ones."""

from __future__ import annotations

from pathlib import Path


def path_with(directory: Path, *names: str) -> str:
    """A PATH with only `names` on it: each an executable that does nothing."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        program = directory / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    return str(directory)
