"""Sizes and counts as every message writes them: `4.5 KB`, `1.2 GB`, `1 package`, `3 processes`. One way for every
room (the data step and the training processes too, which is why it lives here, below them): a size is never raw
bytes nor `0.00 MB` for a few kilobytes, a count never `1 packages` nor `1 package(s)`. Kubernetes quantities
(`16Gi`) are units.py's: a setting is quoted as it was written. Standard library only."""

from __future__ import annotations

_SCALES = (("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15))


def size_text(n: float) -> str:
    """Bytes as people read them, in powers of 1000 with one decimal: 512 B, 4.5 KB, 3.4 MB, 1.2 GB, 2.0 TB."""
    n = max(0.0, float(n))
    if n < 1000:
        return f"{int(n)} B"
    for i, (unit, scale) in enumerate(_SCALES):
        if round(n / scale, 1) < 1000 or i == len(_SCALES) - 1:
            return f"{n / scale:.1f} {unit}"
    raise AssertionError("unreachable: the last scale answers")  # pragma: no cover


def plural(noun: str) -> str:
    """`package` -> `packages`, `process` -> `processes`, `entry` -> `entries`."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"


def counted(n: int, noun: str, many: str | None = None) -> str:
    """`1 package`, `2 packages`, `0 files`; `many`: the plural where it is not the rule's (`1 child`, `2
    children`)."""
    return f"{n} {noun if n == 1 else (many or plural(noun))}"
