"""A run's outputs, streamed through a pod's log: `python -m vdk.plugin.ml_training.runtime.outputs_stream
[--copy] DIR` lists (and with --copy sends) the files a run wrote in its output directory (output_workdir.py:
not the links to its code). `vdk execute --outputs` starts it in a short-lived pod that mounts the run's
directory of the output claim, and reads its log (k8s/outputs_copy.py). Writer and reader of the format here.

The log is text, line by line: an `entry` line per file (path, size), then with --copy each file again as
`file` line, its bytes in base64 lines, and an `end` line with its sha256; `done` ends the stream. The
reader checks every file's size and digest, so a stream cut short (a log rotated under it) is an error, not
a truncated model. Standard library only: it runs in the job's image.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

MARK = "[vdk-ml-training] outputs-export"
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


def export(directory: str, copy: bool, write: Callable[[str], None]) -> None:
    from vdk.plugin.ml_training.runtime.output_workdir import output_files

    files = [OutputFile(p, size, mtime) for p, size, mtime in output_files(directory)]
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
    paths = [a for a in args if not a.startswith("--")]
    if len(paths) != 1:
        sys.stderr.write("usage: outputs_stream [--copy] DIRECTORY\n")
        return 2
    if not os.path.isdir(paths[0]):
        sys.stderr.write(f"{MARK}: {paths[0]} is not a directory\n")
        return 1
    time.sleep(START_AFTER_SECONDS)
    export(paths[0], copy, sys.stdout.write)
    sys.stdout.flush()
    return 0


class StreamError(Exception):
    """The stream does not hold what it says (cut short, or corrupted)."""


@dataclass
class OutputsReader:
    """Reads the stream line by line: the listing, and with `into` the files, written under `into` (each
    first as `NAME.part`, renamed when its digest is right). `progress(path, done, size)` after each line."""

    into: Path | None = None
    progress: Callable[[str, int, int], None] | None = None
    files: list[OutputFile] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    done: bool = False
    _current: tuple | None = None  # (OutputFile, part path, open file, sha256, bytes so far)

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
            raise StreamError(f"unreadable line: {line[:120]!r}") from None
        if kind == "entry":
            self.files.append(OutputFile(str(data["path"]), int(data["size"]), float(data.get("mtime") or 0)))
        elif kind == "file":
            if self._current is not None:
                self._fail(f"{self._current[0].path} ended early")
            self._open(str(data["path"]))
        elif kind == "end":
            if self._current is None or self._current[0].path != data.get("path"):
                self._fail(f"{data.get('path')} arrived without its beginning")
            self._close(data)
        elif kind == "done":
            if self._current is not None:
                self._fail(f"{self._current[0].path} ended early")
            self.done = True

    def feed_all(self, lines: Iterable[str]) -> OutputsReader:
        for line in lines:
            self.feed(line)
        return self.finish()

    def finish(self) -> OutputsReader:
        if self._current is not None or not self.done:
            where = f" in {self._current[0].path}" if self._current is not None else ""
            self._discard()
            raise StreamError(f"the stream ended early{where}")
        return self

    def _open(self, path: str) -> None:
        item = next((f for f in self.files if f.path == path), None)
        if item is None or self.into is None:
            raise StreamError(f"{path} was not in the listing")
        target = _inside(self.into, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        self._current = (item, part, open(part, "wb"), hashlib.sha256(), 0)  # noqa: SIM115 - closed in _close

    def _data(self, text: str) -> None:
        item, part, handle, digest, size = self._current
        try:
            chunk = base64.b64decode(text, validate=True)
        except ValueError:
            raise StreamError(f"corrupted data in {item.path}") from None
        handle.write(chunk)
        digest.update(chunk)
        self._current = (item, part, handle, digest, size + len(chunk))
        if self.progress is not None:
            self.progress(item.path, size + len(chunk), item.size)

    def _close(self, data: dict) -> None:
        item, part, handle, digest, size = self._current
        handle.close()
        self._current = None
        if data.get("sha256") != digest.hexdigest() or size != int(data.get("size", -1)):
            part.unlink(missing_ok=True)
            raise StreamError(f"{item.path} arrived damaged ({size} of {data.get('size')} bytes, digest differs)")
        target = part.with_name(part.name.removesuffix(".part"))
        os.replace(part, target)
        if item.mtime:
            os.utime(target, (item.mtime, item.mtime))
        self.written.append(target)
        if self.progress is not None and size == 0:
            self.progress(item.path, 0, 0)

    def _fail(self, problem: str) -> None:
        self._discard()
        raise StreamError(problem)

    def _discard(self) -> None:
        if self._current is not None:
            self._current[2].close()
            self._current[1].unlink(missing_ok=True)
            self._current = None


def _inside(root: Path, relative: str) -> Path:
    """`root/relative`, refusing paths that leave `root` (the stream comes from a pod)."""
    target = (root / relative).resolve()
    if relative.startswith("/") or not target.is_relative_to(root.resolve()):
        raise StreamError(f"{relative!r} is outside the output directory")
    return target


if __name__ == "__main__":
    sys.exit(main())
