"""Keep stdout for results (`--dry-run` YAML, `-o json`): vdk-core prints a blank line on stdout
while it builds its configuration. In that phase blank output is dropped and anything else goes to
stderr."""

from __future__ import annotations

import sys
from typing import TextIO

_saved: TextIO | None = None


class _ToStderr:
    def write(self, text: str) -> int:
        if text.strip():
            sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def __getattr__(self, name: str):
        return getattr(sys.stderr, name)


def begin() -> None:
    """From `vdk_start`: until `end()`, stdout writes go to stderr (blank ones nowhere)."""
    global _saved
    if _saved is None:
        _saved = sys.stdout
        sys.stdout = _ToStderr()


def end() -> None:
    """From `vdk_initialize`, once the configuration is built."""
    global _saved
    if _saved is not None:
        sys.stdout, _saved = _saved, None
