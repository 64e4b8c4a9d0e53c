"""What a training process tells the local launcher: its result file, and the user's traceback
without the frames of the machinery that ran their code."""
from __future__ import annotations

import os
import runpy
import time
import traceback
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.runtime import protocol

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))
_RUNPY = os.path.abspath(runpy.__file__)


def _is_machinery(frame: traceback.FrameSummary) -> bool:
    path = os.path.abspath(frame.filename)
    return path == _RUNPY or os.path.dirname(path) == _RUNTIME_DIR or frame.filename.startswith("<frozen runpy")


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    kept = [f for f in frames if not _is_machinery(f)]
    if frames and _is_machinery(frames[-1]):
        kept.append(frames[-1])  # the error is in our own code: keep where it happened
    te.stack = traceback.StackSummary.from_list(kept)
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _trim(linked, seen)


def describe(exc: BaseException) -> dict[str, str]:
    """type, one-line message and the user's traceback (runpy and bootstrap frames left out)."""
    te = traceback.TracebackException.from_exception(exc)
    _trim(te, set())
    return {
        "type": type(exc).__name__,
        "message": "".join(te.format_exception_only()).strip(),
        "traceback": "".join(te.format()),
    }


class RankReport:
    """This rank's result file in the launcher's run directory."""

    def __init__(self, run_dir: str, rank: int, local_rank: int):
        self.path = protocol.result_path(run_dir, rank)
        self.data: dict[str, Any] = {
            "rank": rank,
            "local_rank": local_rank,
            "pid": os.getpid(),
            "status": protocol.RUNNING,
            "started_at": time.time(),
        }
        self._write()

    def finish(self, status: str, **fields: Any) -> None:
        self.data.update(fields, status=status, ended_at=time.time())
        self._write()

    def _write(self) -> None:
        protocol.write_json_atomically(Path(self.path), self.data)
