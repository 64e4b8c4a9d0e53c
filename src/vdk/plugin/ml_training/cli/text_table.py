"""A plain text table: columns as wide as their widest cell, two spaces apart (`vdk list`, `vdk show`, sweeps).
What a cell holds came from a user or a cluster (a run's name, a trial's parameters, a pod's message): a control
character in it is shown escaped, never sent to the terminal as it is."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

from vdk.plugin.ml_training.secret_patterns import printable

P = ParamSpec("P")


def shown(view: Callable[P, str]) -> Callable[P, str]:
    """A view's text as a terminal may show it: what it quotes of a user's or a cluster's text (a trial's
    parameters, a pod's message, a file's name) with its control characters escaped. JSON output is left to
    json.dumps, which escapes them itself; a log stream (`--logs`) is the program's own output, shown as it is."""

    @functools.wraps(view)
    def text(*args: P.args, **kwargs: P.kwargs) -> str:
        return printable(view(*args, **kwargs))

    return text


def table(headers: list[str], rows: list[list[str]]) -> str:
    headers = [printable(str(c)) for c in headers]
    rows = [[printable(str(c)).replace("\n", "\\n") for c in row] for row in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)
