"""What uv says on stderr while it resolves and installs requirements.txt (progress bars off) — the one reader of
it: turned into the steps of an activity (an image build's, a local run's overlay: image/build_progress.py shows
them, with a heartbeat while uv is quiet): resolving, each big download with its size, preparing, installing; and
told apart from an error's message. uv writes, one per line:

    Using CPython 3.11.7 interpreter at: /path/python
    Resolved 31 packages in 1.21s
    Downloading torch (760.2MiB)
     Downloaded torch
       Building antlr4-python3-runtime==4.9.3
          Built antlr4-python3-runtime==4.9.3
    Prepared 31 packages in 41.62s
    Installed 31 packages in 2.07s
     + torch==2.13.0
"""

from __future__ import annotations

import re
from typing import Protocol

from vdk.plugin.ml_training.vocabulary.human_units import counted

_RESOLVED = re.compile(r"^Resolved (\d+) packages? in (\S+)")
_DOWNLOADING = re.compile(r"^Downloading (\S+) \(([\d.]+)\s*([KMGT]?i?B)\)")
_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)")
_BUILDING = re.compile(r"^\s*Building (\S+)")  # a source distribution built into a wheel (then kept in uv's cache)
_BUILT = re.compile(r"^\s*Built (\S+)")
_PREPARED = re.compile(r"^Prepared (\d+) packages? in (\S+)")
_INSTALLED = re.compile(r"^Installed (\d+) packages? in (\S+)")
_AUDITED = re.compile(r"^Audited (\d+) packages? in (\S+)")
_NOISE = re.compile(r"^(Using (CPython|Python) |\s*[+-] \S+==)")
_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4, "KB": 1000, "MB": 1000**2, "GB": 1000**3}


class Activity(Protocol):
    """A wait of unknown length that shows its steps (image/build_progress.py's Activity)."""

    def step(self, text: str) -> None: ...

    def expect(self, nbytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...


class UvProgress:
    """Feeds an activity from one uv command's stderr (`line` for each line). `resolving_only`: a `uv pip
    compile`, which resolves and installs nothing."""

    def __init__(self, activity: Activity, resolving_only: bool = False):
        self.activity = activity
        self.resolving_only = resolving_only
        self.sizes: dict[str, int] = {}

    def started(self) -> None:
        self.activity.step("resolving requirements.txt" if self.resolving_only else "installing requirements.txt")

    def line(self, line: str) -> None:
        if match := _RESOLVED.match(line):
            count, took = match.groups()
            then = "" if self.resolving_only else "; downloading what is not cached"
            self.activity.step(f"resolved {counted(int(count), 'package')} in {took}{then}")
        elif match := _DOWNLOADING.match(line):
            name, amount, unit = match.groups()
            size = int(float(amount) * _UNITS.get(unit, 1))
            self.sizes[name] = size
            self.activity.expect(size)
            self.activity.step(f"downloading {name} ({amount} {unit})")
        elif match := _DOWNLOADED.match(line):
            name = match.group(1)
            self.activity.advance(self.sizes.pop(name, 0))
            self.activity.step(f"downloaded {name}")
        elif match := _BUILDING.match(line):
            self.activity.step(f"building {match.group(1)} from its source distribution")
        elif match := _BUILT.match(line):
            self.activity.step(f"built {match.group(1)}")
        elif match := _PREPARED.match(line):
            self.activity.step(f"prepared {counted(int(match.group(1)), 'package')} in {match.group(2)}; installing")
        elif match := _INSTALLED.match(line):
            self.activity.step(f"installed {counted(int(match.group(1)), 'package')} in {match.group(2)}")
        elif match := _AUDITED.match(line):
            self.activity.step(f"checked {counted(int(match.group(1)), 'package')} in {match.group(2)}")


def is_progress(line: str) -> bool:
    """Whether a line of uv's stderr is progress (not part of an error message)."""
    return any(
        pattern.match(line)
        for pattern in (
            _RESOLVED,
            _DOWNLOADING,
            _DOWNLOADED,
            _BUILDING,
            _BUILT,
            _PREPARED,
            _INSTALLED,
            _AUDITED,
            _NOISE,
        )
    )
