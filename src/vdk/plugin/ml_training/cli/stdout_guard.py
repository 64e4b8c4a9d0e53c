"""Keep stdout for results (`--dry-run` YAML, `-o json`): vdk-core prints a blank line on stdout
while it builds its configuration; anything printed in that phase goes to stderr instead."""
from __future__ import annotations

import sys
from typing import TextIO

_saved: TextIO | None = None


def begin() -> None:
    """From `vdk_start`: until `end()`, stdout writes go to stderr."""
    global _saved
    if _saved is None:
        _saved = sys.stdout
        sys.stdout = sys.stderr


def end() -> None:
    """From `vdk_initialize`, once the configuration is built."""
    global _saved
    if _saved is not None:
        sys.stdout, _saved = _saved, None
