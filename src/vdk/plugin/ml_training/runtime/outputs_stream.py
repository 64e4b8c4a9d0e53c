"""A run's outputs, streamed through a pod's log: `python -m vdk.plugin.ml_training.runtime.outputs_stream
[--copy] [--only NAME] DIR` lists (and with --copy sends) the files a run wrote in its output directory
(output_workdir.py: not the links to its code; with --only, those named NAME or below a directory so named).
`vdk execute --outputs` starts it in a short-lived pod that mounts the run's directory of the output claim, and
reads its log (k8s/storage/outputs_copy.py; `vdk show --board` too, with --only). Writer and reader of the format here.

The log is text, line by line: an `entry` line per file (path, size), then with --copy each file again as
`file` line, its bytes in base64 lines, and an `end` line with its sha256; `done` ends the stream. The
reader checks every file's size and digest, so a stream cut short (a log rotated under it) is an error, not
a truncated model. Standard library only: it runs in the job's image.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import NoReturn

from vdk.plugin.ml_training.vocabulary import wire

MARK = wire.mark(wire.OUTPUTS_EXPORT)
CHUNK = 8190  # raw bytes per base64 line: 10920 characters, under the container runtimes' 16 KiB log lines
START_AFTER_SECONDS = 2.0  # the reader starts following the log when the container runs: let it


@dataclass(frozen=True)
class OutputFile:
    path: str
    size: int
    mtime: float = 0.0

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "mtime": self.mtime}


def _line(kind: str, data: dict) -> str:
    return f"{MARK} {kind} {json.dumps(data, sort_keys=True)}\n"


def export(directory: str, copy: bool, write: Callable[[str], object], only: str | None = None) -> None:
    """`only`: the files of that name, or below a directory of that name (`vdk-tensorboard`), and no others."""
    from vdk.plugin.ml_training.runtime.output_workdir import output_files

    files = [
        OutputFile(p, size, mtime) for p, size, mtime in output_files(directory) if only is None or only in p.split("/")
    ]
    for item in files:
        write(_line("entry", item.to_dict()))
    if copy:
        for item in files:
            write(_line("file", {"path": item.path}))
            digest, sent = hashlib.sha256(), 0
            with open(os.path.join(directory, item.path), "rb") as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    sent += len(chunk)
                    write(base64.b64encode(chunk).decode("ascii") + "\n")
            write(_line("end", {"path": item.path, "sha256": digest.hexdigest(), "size": sent}))
    write(_line("done", {"files": len(files), "bytes": sum(f.size for f in files)}))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    copy = "--copy" in args
    only = None
    if "--only" in args and args.index("--only") + 1 < len(args):
        at = args.index("--only")
        only = args.pop(at + 1)
        args.pop(at)
    paths = [a for a in args if not a.startswith("--")]
    if len(paths) != 1:
        sys.stderr.write("usage: outputs_stream [--copy] [--only NAME] DIRECTORY\n")
        return 2
    if not os.path.isdir(paths[0]):
        sys.stderr.write(f"{MARK}: {paths[0]} is not a directory\n")
        return 1
    time.sleep(START_AFTER_SECONDS)
    export(paths[0], copy, sys.stdout.write, only)
    sys.stdout.flush()
    return 0


class StreamError(Exception):
    """The stream does not hold what it says (cut short, corrupted, or naming a place outside the target)."""


def display(path: str) -> str:
    """A file name as it may be printed: control characters (terminal escape sequences among them) and
    whatever else a terminal would not show as itself are escaped (`\\x1b`), the rest is kept."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode("ascii") for ch in path
    )


def relative_parts(path: object) -> list[str]:
    """The components of an entry's path, which must name a file under the output directory: a non-empty
    relative POSIX path without `.` or `..` components, empty ones (`a//b`, a trailing `/`) or NUL."""
    if not isinstance(path, str) or not path:
        raise StreamError(f"an entry without a file name ({path!r})")
    parts = path.split("/")
    if path.startswith("/") or "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise StreamError(f"the entry {display(path)!r} does not name a file inside the output directory")
    return parts


@dataclass
class OutputsReader:
    """Reads the stream line by line: the listing, and with `into` the files, written under `into` (each
    first as a new hidden temporary file beside its place, never an existing one, renamed when its digest is
    right). Nothing is written outside `into` and no link in it is followed. `progress(path, done, size)`
    after each line. Anything malformed is a StreamError."""

    into: Path | None = None
    progress: Callable[[str, int, int], None] | None = None
    files: list[OutputFile] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    done: bool = False
    _current: tuple | None = None  # (OutputFile, part path, open file, sha256, bytes so far)

    def __post_init__(self) -> None:
        if self.into is not None:
            self.into = Path(os.path.abspath(self.into))
        mask = os.umask(0)
        os.umask(mask)
        self._mode = 0o666 & ~mask  # of the files written, as `open` would make them

    def feed(self, line: str) -> None:
        if self._current is not None and not line.startswith(MARK):
            self._data(line.strip())
            return
        if not line.startswith(MARK):
            return  # anything else in the log (a warning of the interpreter)
        kind, _, payload = line[len(MARK) + 1 :].partition(" ")
        try:
            data = json.loads(payload)
        except ValueError:
            self._fail(f"unreadable line: {display(line[:120])!r}")
        if not isinstance(data, dict):
            self._fail(f"unreadable line: {display(line[:120])!r}")
        try:
            self._line(kind, data)
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            self._fail(f"a malformed {display(kind)!r} line ({type(e).__name__}: {display(str(e))})")

    def _line(self, kind: str, data: dict) -> None:
        if kind == "entry":
            relative_parts(data["path"])
            size, mtime = int(data["size"]), float(data.get("mtime") or 0)
            if size < 0:
                raise ValueError(f"negative size {size}")
            if not math.isfinite(mtime) or not 0 <= mtime < 2**33:
                mtime = 0.0
            self.files.append(OutputFile(data["path"], size, mtime))
        elif kind == "file":
            if self._current is not None:
                self._fail(f"{display(self._current[0].path)} ended early")
            self._open(data["path"])
        elif kind == "end":
            if self._current is None or self._current[0].path != data.get("path"):
                self._fail(f"{display(str(data.get('path')))} arrived without its beginning")
            self._close(data)
        elif kind == "done":
            if self._current is not None:
                self._fail(f"{display(self._current[0].path)} ended early")
            self.done = True

    def feed_all(self, lines: Iterable[str]) -> OutputsReader:
        try:
            for line in lines:
                self.feed(line)
            return self.finish()
        except BaseException:  # cut short, interrupted: no half-written file stays
            self._discard()
            raise

    def finish(self) -> OutputsReader:
        if self._current is not None or not self.done:
            where = f" in {display(self._current[0].path)}" if self._current is not None else ""
            self._discard()
            raise StreamError(f"the stream ended early{where}")
        return self

    def _open(self, path: str) -> None:
        item = next((f for f in self.files if f.path == path), None)
        if item is None or self.into is None:
            raise StreamError(f"{display(str(path))} was not in the listing")
        parent = _directory_for(self.into, relative_parts(path)[:-1])
        name = relative_parts(path)[-1]
        target = parent / name
        if target.is_dir() and not target.is_symlink():
            raise StreamError(f"{display(path)}: a directory of that name is in the way in {display(str(self.into))}")
        # A new file of its own (O_EXCL: never an existing file, never through a link), renamed when complete.
        descriptor, part = tempfile.mkstemp(prefix=f".{name[:80]}.", suffix=".part", dir=parent)
        os.fchmod(descriptor, self._mode)
        self._current = (item, Path(part), os.fdopen(descriptor, "wb"), hashlib.sha256(), 0)

    def _data(self, text: str) -> None:
        assert self._current is not None  # feed() sends data only while a file is open
        item, part, handle, digest, size = self._current
        try:
            chunk = base64.b64decode(text, validate=True)
        except ValueError:
            self._fail(f"corrupted data in {display(item.path)}")
        if size + len(chunk) > item.size:
            self._fail(f"{display(item.path)} is longer than its listed {item.size} bytes")
        handle.write(chunk)
        digest.update(chunk)
        self._current = (item, part, handle, digest, size + len(chunk))
        if self.progress is not None:
            self.progress(item.path, size + len(chunk), item.size)

    def _close(self, data: dict) -> None:
        assert self._current is not None  # _line() checked that this file is the open one
        item, part, handle, digest, size = self._current
        handle.close()
        self._current = None
        announced = data.get("size")
        if data.get("sha256") != digest.hexdigest() or size != announced or size != item.size:
            part.unlink(missing_ok=True)
            raise StreamError(
                f"{display(item.path)} arrived damaged ({size} of {item.size} bytes, or its digest differs)"
            )
        target = part.parent / relative_parts(item.path)[-1]
        try:
            os.replace(part, target)  # replaces a link of that name itself, never what it points to
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        if item.mtime:
            os.utime(target, (item.mtime, item.mtime), follow_symlinks=False)
        self.written.append(target)
        if self.progress is not None and size == 0:
            self.progress(item.path, 0, 0)

    def _fail(self, problem: str) -> NoReturn:
        self._discard()
        raise StreamError(problem)

    def _discard(self) -> None:
        if self._current is not None:
            self._current[2].close()
            self._current[1].unlink(missing_ok=True)
            self._current = None


def _directory_for(root: Path, parts: list[str]) -> Path:
    """`root/parts...`, made where missing; each component a real directory (a link is not followed)."""
    root.mkdir(parents=True, exist_ok=True)
    if root.is_symlink() or not root.is_dir():
        raise StreamError(f"{display(str(root))} is not a directory")
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink():
            raise StreamError(
                f"{display(str(here))} is a symbolic link: the copy does not follow links in the target directory"
            )
        if here.exists() and not here.is_dir():
            raise StreamError(f"{display(str(here))} is a file where the outputs have a directory")
        here.mkdir(exist_ok=True)
    return here


if __name__ == "__main__":
    sys.exit(main())
