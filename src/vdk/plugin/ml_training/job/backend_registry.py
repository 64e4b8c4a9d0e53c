"""The names of the backends a job may ask for (`backend = ...`), as backends register them: entry points of the
group `vdk.plugin.ml_training.backends` (as TorchX registers its schedulers under `torchx.schedulers`).

The spec knows no backend: it reads the names here, without loading anything; k8s/backends loads the objects of
the same entry points. setuptools writes a distribution's entry points sorted by name, so a registration carries
its place in the listing as a number before its name: `10-pytorchjob = package.module:BACKEND` registers the
backend `pytorchjob`, listed before `20-trainjob`. A name without a number is listed after those with one.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re

from vdk.plugin.ml_training.errors import MLTrainingError

ENTRY_POINT_GROUP = "vdk.plugin.ml_training.backends"
AUTO_BACKEND = "auto"
_PLACED = re.compile(r"^([0-9]+)-(.+)$")


def _place_and_name(entry_point_name: str) -> tuple[float, str]:
    match = _PLACED.match(entry_point_name.strip())
    if match:
        return int(match.group(1)), match.group(2)
    return float("inf"), entry_point_name.strip()


@functools.cache
def registered() -> tuple[tuple[str, importlib.metadata.EntryPoint], ...]:
    """(backend name, entry point) of every registered backend, in listing order; a name registered twice counts
    once (the first in that order). MLTrainingError when none is registered (the plugin's metadata is missing)."""
    entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    out: dict[str, importlib.metadata.EntryPoint] = {}
    for entry_point in sorted(entry_points, key=lambda e: (_place_and_name(e.name), e.value)):
        out.setdefault(_place_and_name(entry_point.name)[1], entry_point)
    if not out:
        raise MLTrainingError(
            f"no backend is registered (entry points of the group {ENTRY_POINT_GROUP})",
            "reinstall the plugin so that its entry points exist: `make install`, or `pip install -e .`",
        )
    return tuple(out.items())


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in listing order."""
    return tuple(name for name, _ in registered())


def backend_choices() -> tuple[str, ...]:
    """What `backend` may be: `auto` and every registered backend's name."""
    return (AUTO_BACKEND, *backend_names())
