"""The smoke check's verdict beside the real GPU's, and whether they agree.

A verdict is whether a run passed and, for a failure, where in the job's own code it failed (`train.py:12`, the
last frame of the traceback that is in the job's files) with the error's one line. Two verdicts agree when both
passed, or both failed at the same place; both failed with the place known on one side only is a weaker
agreement, said as such; anything else is a disagreement, listed with its cause: the limit the smoke check
named itself, or what the case's catalogue entry says (cases.py), else "unexplained" (the acceptance of the
check: none of those).

Pure (no process, no torch): the report and the unit tests use it on CPU.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any

AGREE = "agree"
AGREE_VERDICT = "agree (verdict only)"  # both failed; where is known on one side only
DISAGREE = "disagree"
NOT_COMPARED = "not compared"
UNEXPLAINED = "unexplained"

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
# The import check's finding: "train.py:3: `import yaml` needs PyYAML"
_IMPORT = re.compile(r"(?P<file>[\w./-]+\.py):(?P<line>\d+): `(?:import|from) ")
# What the smoke check says of a construct it cannot emulate (ops/smoke_gaps, diagnosis): a limit, not a bug
_LIMIT = re.compile(r"(?P<what>[^\n]*?) (?:cannot run on the smoke run's virtual GPUs|is not available in gloo)")
_LIMIT_WORDS = ("a limit of the smoke check", "a limit of the CPU check")


@dataclass(frozen=True)
class Verdict:
    """One run's verdict. `passed` None: it gave none (not run, no result), `note` says why."""

    passed: bool | None
    where: str | None = None  # "train.py:12": the job's file and line it failed at (None: not known)
    error: str = ""  # the failure's one line ("RuntimeError: Expected all tensors ...")
    limit: str = ""  # the smoke check named the failure a limit of itself: what it named
    seconds: float | None = None
    steps: int | None = None
    note: str = ""

    @property
    def label(self) -> str:
        if self.passed is None:
            return "no verdict" + (f" ({self.note})" if self.note else "")
        if self.passed:
            return "pass"
        return f"fail at {self.where}" if self.where else "fail"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Agreement:
    outcome: str  # AGREE, AGREE_VERDICT, DISAGREE or NOT_COMPARED
    summary: str  # "both pass", "both fail at train.py:12", "smoke passes, GPU fails at train.py:9"
    cause: str = ""  # for anything but AGREE: why (UNEXPLAINED when nothing says)

    @property
    def explained(self) -> bool:
        return self.outcome == AGREE or (bool(self.cause) and self.cause != UNEXPLAINED)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "explained": self.explained}


def compare(smoke: Verdict, gpu: Verdict, known_cause: str = "") -> Agreement:
    """Whether the two verdicts agree; `known_cause`: what the case's catalogue says of a difference it expects
    (a limit of one GPU, a package only the image has, ...)."""
    if smoke.passed is None or gpu.passed is None:
        missing = [
            f"{side}: {v.note or 'no verdict'}" for side, v in (("smoke", smoke), ("GPU", gpu)) if v.passed is None
        ]
        return Agreement(NOT_COMPARED, "; ".join(missing), known_cause or "a run gave no verdict")
    if smoke.passed and gpu.passed:
        return Agreement(AGREE, "both pass")
    if not smoke.passed and not gpu.passed:
        if smoke.where and smoke.where == gpu.where:
            return Agreement(AGREE, f"both fail at {smoke.where}")
        if smoke.where and gpu.where:
            summary = f"both fail, the smoke check at {smoke.where}, the GPU at {gpu.where}"
            return Agreement(DISAGREE, summary, _cause(smoke, known_cause))
        side = "the smoke check" if not smoke.where else "the GPU run"
        summary = f"both fail ({side} names no line of the job)"
        return Agreement(
            AGREE_VERDICT, summary, known_cause or f"{side} failed outside the job's code: {_error(smoke, gpu)}"
        )
    if smoke.passed:
        return Agreement(DISAGREE, f"smoke passes, GPU {gpu.label}", _cause(smoke, known_cause))
    return Agreement(DISAGREE, f"smoke {smoke.label}, GPU passes", _cause(smoke, known_cause))


def _error(smoke: Verdict, gpu: Verdict) -> str:
    return (smoke.error if not smoke.where else gpu.error) or "no error recorded"


def _cause(smoke: Verdict, known_cause: str) -> str:
    if smoke.limit:
        return f"the smoke check names it a limit of itself, not a bug in the code: {smoke.limit}"
    return known_cause or UNEXPLAINED


def where_in_traceback(text: str, job_root: str, entry_dir: str = "") -> str | None:
    """The last frame of `text` (a Python traceback) in a file below `job_root` (or `entry_dir`, a second place
    the job's files are known by: the run's copy), as `relative/path.py:LINE`; None when no frame is there."""
    roots = [r.rstrip("/") + "/" for r in (job_root, entry_dir) if r]
    found = None
    for match in _FRAME.finditer(text or ""):
        path = match.group("file")
        for root in roots:
            if path.startswith(root):
                found = f"{path[len(root) :]}:{match.group('line')}"
                break
    return found


def where_in_import_check(text: str) -> str | None:
    """Where the import check's finding says the first missing import is (`train.py:3`)."""
    match = _IMPORT.search(text or "")
    return f"{match.group('file')}:{match.group('line')}" if match else None


def limit_named(text: str) -> str:
    """What the smoke check named a limit of itself in its finding (`text`), or ""."""
    if not any(words in (text or "") for words in _LIMIT_WORDS):
        return ""
    match = _LIMIT.search(text)
    what = match.group("what").strip() if match else ""
    return (what.removeprefix("note: ").removeprefix("Fix: ") or "a construct the CPU cannot emulate")[:200]


def one_line(text: str, width: int = 200) -> str:
    """The last line of an error (a traceback's exception line), cut to `width`."""
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= width else last[: width - 1] + "…"


def tally(agreements: list[Agreement]) -> dict[str, int]:
    """How many of each outcome, and how many differences nothing explains."""
    counts = {AGREE: 0, AGREE_VERDICT: 0, DISAGREE: 0, NOT_COMPARED: 0}
    for a in agreements:
        counts[a.outcome] = counts.get(a.outcome, 0) + 1
    counts[UNEXPLAINED] = sum(1 for a in agreements if not a.explained)
    return counts
