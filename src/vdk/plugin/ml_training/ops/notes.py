"""Where a use case's progress and notes go: a `Say` callback, by default stderr (stdout is for results)."""

from __future__ import annotations

import sys
from collections.abc import Callable

Say = Callable[[str], None]


def to_stderr(text: str) -> None:
    """One line on stderr, flushed (as the command line wrote its notes)."""
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()
