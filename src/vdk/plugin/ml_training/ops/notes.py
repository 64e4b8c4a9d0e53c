"""Where a use case's progress and notes go: a `Say` callback, by default stderr (stdout is for results)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from vdk.plugin.ml_training.secret_patterns import printable

Say = Callable[[str], None]


def to_stderr(text: str) -> None:
    """One line on stderr, flushed (as the command line wrote its notes), its control characters escaped: a note
    quotes what a server or a pod said."""
    sys.stderr.write(f"{printable(text)}\n")
    sys.stderr.flush()
