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
from vdk.plugin.ml_training.vocabulary import wire

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))
_RUNPY = os.path.abspath(runpy.__file__)
_TRACEBACK = "Traceback (most recent call last):"


def _is_machinery(frame: traceback.FrameSummary) -> bool:
    """Frames of what ran the user's code: runpy, the import system, the plugin's runtime (its stand-ins)."""
    path = os.path.abspath(frame.filename)
    return (
        path == _RUNPY
        or path.startswith(_RUNTIME_DIR + os.sep)  # its sub-packages too (virtual_gpu/)
        or frame.filename.startswith(("<frozen runpy", "<frozen importlib._bootstrap"))
    )


def _trim(te: traceback.TracebackException, seen: set[int], keep_last: bool = True) -> None:
    """Leave out the machinery's frames, so that the first frame shown is the user's. An error the plugin
    itself raised (its frame is the last, at a `raise`) keeps that frame, marked as the plugin's; one raised
    by what a stand-in called (torch's operator) ends where the user's code and the library's frames end."""
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    kept = [f for f in frames if not _is_machinery(f)]
    last = frames[-1] if frames else None
    if keep_last and last is not None and _is_machinery(last) and (last.line or "").lstrip().startswith("raise"):
        kept.append(_marked(last))
    te.stack = traceback.StackSummary.from_list(kept)
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _trim(linked, seen, keep_last)


def _from_user_code(te: traceback.TracebackException) -> None:
    """Leave out the frames of installed packages above the first frame of the user's code (if there is one)."""
    installed = tuple(os.path.abspath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if not os.path.abspath(f.filename).startswith(installed)), None)
    if first:
        te.stack = traceback.StackSummary.from_list(frames[first:])


def _marked(frame: traceback.FrameSummary) -> traceback.FrameSummary:
    name = os.path.relpath(frame.filename, os.path.dirname(_RUNTIME_DIR))
    return traceback.FrameSummary(
        f"<vdk-ml-training smoke run: {name}>", frame.lineno, frame.name, lookup_line=False, line=frame.line
    )


def describe(exc: BaseException, from_user_code: bool = False) -> dict[str, Any]:
    """type, one-line message and the user's traceback (runpy and bootstrap frames left out). An error
    that the smoke run's virtual GPU raised as CUDA would is marked `virtual_gpu`: it ends at the user's
    line, as CUDA's does, not in the stand-in that raised it. `from_user_code`: the traceback starts at the
    first frame of the user's code (a framework that called it, such as Hydra, is left out above it)."""
    te = traceback.TracebackException.from_exception(exc)
    virtual_gpu = _raised_by_virtual_gpu(exc)
    _trim(te, set(), keep_last=not virtual_gpu)
    if from_user_code:
        _from_user_code(te)
    described: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": "".join(te.format_exception_only()).strip(),
        "traceback": "".join(te.format()),
    }
    if virtual_gpu:
        described["virtual_gpu"] = True
    inner = _embedded(str(exc))
    if inner is not None:  # a launcher's error that carries its worker's traceback as text
        kind, line, text = inner
        described.update(type=kind, message=line, traceback=text, relayed=type(exc).__name__)
    return described


def _embedded(message: str) -> tuple[str, str, str] | None:
    """(type, 'Type: message', the traceback) of the last traceback a message quotes (elastic's
    ChildFailedError, mp.spawn's ProcessRaisedException relay their worker's), or None."""
    start = message.rfind(_TRACEBACK)
    if start < 0:
        return None
    text = message[start:].rstrip()
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if not line.startswith((" ", "\t", "=", "-")):
            kind = line.split(":", 1)[0].strip()
            if kind.replace(".", "").replace("_", "").isalnum():
                return kind.rsplit(".", 1)[-1], line.strip(), text
            break
    return None


# The last error an argparse parser reported (usage, "prog: error: message"): the SystemExit(2) that follows
# is described by it rather than by a traceback into argparse.
_argument_error: tuple[str, str] | None = None


def report_argument_errors() -> None:
    """Remember what argparse says before it exits with 2, when (and if) the script imports argparse; and
    what parsers built on it say (jsonargparse under Lightning CLI): subclasses with an `error` of their own."""
    from vdk.plugin.ml_training.runtime import post_import

    def patch(argparse: Any) -> None:
        parser_class = argparse.ArgumentParser
        if getattr(parser_class.error, "_vdk_remembers", False):
            return
        parser_class.error = _remembering(parser_class.error)

        def __init_subclass__(cls: Any, **kwargs: Any) -> None:
            super(parser_class, cls).__init_subclass__(**kwargs)
            own = cls.__dict__.get("error")
            if callable(own) and not getattr(own, "_vdk_remembers", False):
                cls.error = _remembering(own)

        parser_class.__init_subclass__ = classmethod(__init_subclass__)

    post_import.when_imported("argparse", patch)


def _remembering(original: Any) -> Any:
    def error(parser: Any, message: str, *args: Any, **kwargs: Any) -> Any:
        global _argument_error
        try:
            # a parser of subcommands says which one refused (jsonargparse: the error's subcommand_parser)
            which = getattr(next(iter(args), kwargs.get("ex")), "subcommand_parser", None) or parser
            _argument_error = (which.format_usage().strip(), f"{which.prog}: error: {message}")
        except Exception:  # noqa: BLE001 - the parser's own error goes on regardless
            pass
        return original(parser, message, *args, **kwargs)

    error._vdk_remembers = True  # type: ignore[attr-defined]  # attribute of a function object
    return error


def describe_exit(exc: SystemExit) -> dict[str, Any]:
    """A script that exited with a non-zero code: argparse's usage and message when its parser refused the
    arguments (marked `arguments`); the error it exited on when a framework that wraps `main` caught one,
    printed it and exited (Hydra's @hydra.main: `sys.exit(1)` while handling it), marked `exited`; else the
    traceback to the exit."""
    if exc.code == 2 and _argument_error is not None:
        usage, message = _argument_error
        return {**describe(exc), "message": message, "traceback": f"{usage}\n{message}", "arguments": True}
    caught = _caught(exc)
    if caught is not None:
        described = describe(caught, from_user_code=True)
        return {**described, "exited": exc.code if isinstance(exc.code, int) else str(exc.code)}
    described = describe(exc)
    described["message"] = f"the script exited with {exc.code!r}" if isinstance(exc.code, int) else str(exc.code)
    return described


def _caught(exc: SystemExit) -> BaseException | None:
    """The error a SystemExit was raised while handling (the framework's `except Exception: ... sys.exit(1)`)."""
    seen: set[int] = set()
    chain = exc.__cause__ or exc.__context__
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if isinstance(chain, Exception):
            return chain
        chain = chain.__cause__ or chain.__context__
    return None


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
            sys.stderr.write(wire.warning(f"steps are no longer recorded ({type(e).__name__}: {e})") + "\n")
        self._written, self._at = steps, now


def json_number(value: float | None) -> float | str | None:
    """JSON has no NaN: non-finite losses travel as text."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
