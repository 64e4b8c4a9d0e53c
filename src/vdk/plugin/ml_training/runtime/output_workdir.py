"""The working directory of a cluster run: its output directory, with the job's code beside what it writes.

A pod starts in the image's job directory. When the run has an output directory (VDK_ML_TRAINING_OUTPUT_DIR,
the run's directory of its output claim), every rank links the job's files into it (directories made,
files as symbolic links to the image's) and makes it the working directory before the user's code runs:
what the code writes relative to it (`snapshot.pt`, `out/`, a Trainer's `output_dir`) lands in the output
volume and survives the pod; a restarted pod finds it there, so code that resumes by itself resumes; the
code itself stays in the image. Every rank does it, concurrently: each step tolerates another rank's.

Rank 0 ends with one line that says how much the directory holds (`[vdk-ml-training] outputs files=3
bytes=1048576 dir=/opt/vdk-ml/outputs`), which `vdk show` reads from its log: writer and reader here.
Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass

from vdk.plugin.ml_training.vocabulary import wire

MARK = wire.mark(wire.OUTPUTS)
_LINE = re.compile(re.escape(MARK) + r" files=(\d+) bytes=(\d+) dir=(\S+)")
# Written by Python next to the code it imports through the links: not an output.
NOT_OUTPUTS = frozenset({"__pycache__"})
MAX_COUNTED = 100_000  # files counted for the summary line; more are not counted (a slow network volume)


def output_dir() -> str | None:
    from vdk.plugin.ml_training.runtime import protocol

    return os.environ.get(protocol.OUTPUT_DIR) or None


def enter_output_dir(target: str | None = None) -> str | None:
    """Link the working directory's files into the output directory and move there; None when there is
    none, or when it already is the working directory (local runs)."""
    target = target or output_dir()
    if not target:
        return None
    code = os.getcwd()
    if os.path.realpath(code) == os.path.realpath(target):
        return None
    os.makedirs(target, exist_ok=True)
    from vdk.plugin.ml_training.runtime import earlier_outputs

    source = earlier_outputs.source_dir()
    if source is not None:  # a run that continues another begins with its outputs (vdk execute --start --from)
        earlier_outputs.begin_with(source, target)
    link_tree(code, target)
    os.chdir(target)
    return target


def link_tree(code: str, into: str) -> None:
    """Directories of `code` made in `into`, its files as symbolic links; what `into` already has (an
    earlier attempt's output, or another rank's links) is kept."""
    for root, dirs, files in os.walk(code):
        relative = os.path.relpath(root, code)
        target = into if relative == "." else os.path.join(into, relative)
        os.makedirs(target, exist_ok=True)
        for name in list(dirs):
            if os.path.islink(os.path.join(root, name)):
                dirs.remove(name)  # a linked directory: linked as it is, not walked
                files.append(name)
        for name in files:
            _link(os.path.join(root, name), os.path.join(target, name))


def _link(source: str, destination: str) -> None:
    try:
        os.symlink(source, destination)
    except FileExistsError:
        pass  # another rank's link, or a file of an earlier attempt: that is what the run wrote


@dataclass(frozen=True)
class OutputSummary:
    files: int
    bytes: int
    directory: str

    def line(self) -> str:
        return f"{MARK} files={self.files} bytes={self.bytes} dir={self.directory}"


def output_files(directory: str) -> Iterator[tuple[str, int, float]]:
    """(path relative to `directory`, size, mtime) of every regular file the run wrote there: not the links
    to the job's code, not Python's caches. Sorted by path."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in NOT_OUTPUTS and not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):  # lstat: a link to the job's code is no regular file
                continue
            yield os.path.relpath(path, directory).replace(os.sep, "/"), info.st_size, info.st_mtime


def summarize(directory: str) -> OutputSummary:
    files = size = 0
    for _, length, _ in output_files(directory):
        files += 1
        size += length
        if files >= MAX_COUNTED:
            break
    return OutputSummary(files, size, directory)


def report(directory: str) -> None:
    """Rank 0's last line about the output directory; never fails the run."""
    import sys

    try:
        line = summarize(directory).line()
    except Exception:  # noqa: BLE001 - a summary line is not worth a failed run
        return
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_summary(lines: Iterable[str]) -> OutputSummary | None:
    """The last output summary among a log's lines (None without one)."""
    found = None
    for line in lines:
        if MARK in line:
            match = _LINE.search(line)
            if match:
                found = OutputSummary(int(match.group(1)), int(match.group(2)), match.group(3))
    return found
