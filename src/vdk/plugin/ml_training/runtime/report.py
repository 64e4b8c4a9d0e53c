"""What a training process tells the local launcher: its result file, and the user's traceback
without the frames of the machinery that ran their code."""

from __future__ import annotations

import math
import os
import runpy
import sys
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


def _trim(te: traceback.TracebackException, seen: set[int], keep_last: bool = True) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    kept = [f for f in frames if not _is_machinery(f)]
    if keep_last and frames and _is_machinery(frames[-1]):
        kept.append(frames[-1])  # the error is in our own code: keep where it happened
    te.stack = traceback.StackSummary.from_list(kept)
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _trim(linked, seen, keep_last)


def describe(exc: BaseException) -> dict[str, Any]:
    """type, one-line message and the user's traceback (runpy and bootstrap frames left out). An error
    that the smoke run's virtual GPU raised as CUDA would is marked `virtual_gpu`: it ends at the user's
    line, as CUDA's does, not in the stand-in that raised it."""
    te = traceback.TracebackException.from_exception(exc)
    virtual_gpu = _raised_by_virtual_gpu(exc)
    _trim(te, set(), keep_last=not virtual_gpu)
    described: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": "".join(te.format_exception_only()).strip(),
        "traceback": "".join(te.format()),
    }
    if virtual_gpu:
        described["virtual_gpu"] = True
    return described


def _raised_by_virtual_gpu(exc: BaseException) -> bool:
    seen: set[int] = set()
    chain: BaseException | None = exc
    while chain is not None and id(chain) not in seen:
        if getattr(chain, "_vdk_virtual_gpu", False):
            return True
        seen.add(id(chain))
        chain = chain.__cause__ or chain.__context__
    return False


class RankReport:
    """This rank's result file in the launcher's run directory."""

    def __init__(self, run_dir: str, rank: int | str, local_rank: int, **fields: Any):
        self.path = protocol.result_path(run_dir, rank)
        self.data: dict[str, Any] = {
            "rank": rank,
            "local_rank": local_rank,
            "pid": os.getpid(),
            "status": protocol.RUNNING,
            "started_at": time.time(),
            **fields,
        }
        self._write()

    def update(self, **fields: Any) -> None:
        """Record facts while the rank runs (the steps so far): a rank that never finishes still tells."""
        self.data.update(fields)
        self._write()

    def finish(self, status: str, **fields: Any) -> None:
        self.data.update(fields, status=status, ended_at=time.time())
        self._write()

    def _write(self) -> None:
        protocol.write_json_atomically(Path(self.path), self.data)


class StepRecorder:
    """A step listener (runtime/steps.py) that keeps the step count and the last loss in the result
    file while the rank trains, so that a rank stopped at the timeout, killed or crashed still says
    how far it got.

    `period`: at least that many seconds between two writes (the first step is always written).
    0 writes every step: smoke runs take a handful. Reading the loss waits for the device that
    computed it, so a full run (period > 0) does that once a period, never every step."""

    def __init__(self, report: RankReport, period: float = 0.0):
        self.report = report
        self.period = period
        self._written = 0
        self._at = 0.0
        self._on = True

    def __call__(self, counter: Any, optimizer: Any = None) -> None:
        steps = counter.steps
        if steps == self._written or not self._on:
            return  # a second optimizer finishing the same step
        now = time.monotonic()
        if self._written and now - self._at < self.period:
            return
        try:
            self.report.update(steps=steps, last_loss=json_number(counter.loss()))
        except Exception as e:  # noqa: BLE001 - a full disk must not stop training: stop recording instead
            self._on = False
            sys.stderr.write(f"[vdk-ml-training] warning: steps are no longer recorded ({type(e).__name__}: {e})\n")
        self._written, self._at = steps, now


def json_number(value: float | None) -> float | str | None:
    """JSON has no NaN: non-finite losses travel as text."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
