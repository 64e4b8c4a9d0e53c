"""The job's requirements.txt, read one way for every room that asks what it holds: the import check, the image's
dependency layer and its torch warning, a local run's overlay, the diagnosis of a missing package.

pip's file format: `#` comments, lines continued with a backslash, `-r FILE` / `--requirement FILE` includes
(relative to the file that names them, followed once), options (`--index-url`, `-c FILE`, ...), editable and URL
requirements (named by `#egg=` or their wheel's file name), and PEP 508 requirements, which `packaging` reads and
names canonically (PEP 503: `Foo_Bar.baz` is `foo-bar-baz`). Installing the file stays uv's (dependencies/).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement
from packaging.utils import InvalidName
from packaging.utils import InvalidWheelFilename
from packaging.utils import canonicalize_name
from packaging.utils import parse_wheel_filename

REQUIREMENTS = "requirements.txt"

_INCLUDE = ("-r", "--requirement")
_EDITABLE = ("-e", "--editable")
_EGG = re.compile(r"#egg=([A-Za-z0-9][A-Za-z0-9._-]*)")
# pip's options of one requirement (`--hash=sha256:...`, `--config-settings ...`) after it.
_PER_REQUIREMENT_OPTIONS = re.compile(r"\s--?[A-Za-z]")


def is_distribution_name(text: str) -> bool:
    """Whether `text` is a valid distribution name (`torch`, `nvidia-ml-py`, `zope.interface`)."""
    try:
        canonicalize_name(text, validate=True)
    except InvalidName:
        return False
    return True


def requirement_name(text: str) -> str | None:
    """The canonical name of one requirement (`Torch[cuda]>=2 ; python_version > '3'`: `torch`), None when it is
    no PEP 508 requirement."""
    parsed = _requirement(text)
    return canonicalize_name(parsed.name) if parsed is not None else None


def _requirement(text: str) -> Requirement | None:
    try:
        return Requirement(_PER_REQUIREMENT_OPTIONS.split(text, 1)[0].strip())
    except InvalidRequirement:
        return None


@dataclass(frozen=True)
class RequirementsFile:
    """What a requirements file holds: `lines`, its own (comments dropped, continued lines joined, includes as
    written); and, with the files it includes, `names` (canonical name -> the extras asked for), `options` (option
    lines other than includes) and `unnamed` (lines that name no distribution: a path, a malformed line)."""

    path: Path | None = None
    lines: tuple[str, ...] = ()
    names: dict[str, frozenset[str]] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    unnamed: tuple[str, ...] = ()

    @classmethod
    def read(cls, path: Path | None) -> RequirementsFile:
        """The file at `path` (none, or one that cannot be read: empty)."""
        if path is None:
            return cls()
        reader = _Reader()
        lines = reader.read(path)
        return cls(path, tuple(lines), reader.names, tuple(reader.options), tuple(reader.unnamed))

    def lists(self, distribution: str) -> bool:
        return canonicalize_name(distribution) in self.names

    def only(self, provided: Iterable[str]) -> bool:
        """Whether the file asks for nothing but distributions among `provided` (an option would change what the
        installer does, a line without a name is not known to be provided)."""
        have = {canonicalize_name(name) for name in provided}
        return not self.options and not self.unnamed and set(self.names) <= have


class _Reader:
    def __init__(self) -> None:
        self.names: dict[str, frozenset[str]] = {}
        self.options: list[str] = []
        self.unnamed: list[str] = []
        self._seen: set[Path] = set()

    def read(self, path: Path) -> list[str]:
        """The lines of `path`, what they ask for recorded (its includes' too, each file once)."""
        resolved = path.resolve()
        if resolved in self._seen:
            return []
        self._seen.add(resolved)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        lines = []
        for line in text.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
                self._line(line, path.parent)
        return lines

    def _line(self, line: str, folder: Path) -> None:
        words = line.split()
        first = words[0]
        if first in _INCLUDE and len(words) > 1:
            self.read(folder / words[1])
        elif first.startswith("--requirement="):
            self.read(folder / first.split("=", 1)[1])
        elif first.startswith("-r") and len(first) > 2:  # -rFILE
            self.read(folder / first[2:].lstrip("="))
        elif first in _EDITABLE and len(words) > 1:
            self._url(words[1], line)
        elif first.startswith("-"):
            self.options.append(line)  # an index, constraints, --pre, ...
        elif "://" in first or first.startswith(("git+", "file:")):
            self._url(first, line)
        else:
            parsed = _requirement(line)
            if parsed is None:
                self.unnamed.append(line)
            else:
                self._add(parsed.name, parsed.extras)

    def _url(self, url: str, line: str) -> None:
        egg = _EGG.search(url)
        if egg:
            self._add(egg.group(1), ())
            return
        try:
            name = parse_wheel_filename(url.rsplit("/", 1)[-1])[0]
        except InvalidWheelFilename:
            self.unnamed.append(line)
            return
        self._add(name, ())

    def _add(self, name: str, extras: Iterable[str]) -> None:
        key = canonicalize_name(name)
        self.names[key] = self.names.get(key, frozenset()) | {canonicalize_name(e) for e in extras}
