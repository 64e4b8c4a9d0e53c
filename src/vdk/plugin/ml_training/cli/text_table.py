"""A plain text table: columns as wide as their widest cell, two spaces apart (`vdk list`, `vdk show`, sweeps)."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)
