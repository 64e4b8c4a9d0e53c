"""A rank held by its data step: the init container that fetches the pinned datasets failed (a dataset that changed
since the deploy and cannot be had at its pinned version, credentials refused, a cache claim out of space). Its
termination message says what is wrong and what to do (datafetch/__main__.py writes it)."""

from __future__ import annotations

import re

from vdk.plugin.ml_training.datafetch.fetch_step import parse_failure
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import Waiting


def data_step_failed(rank: RankEvidence) -> Waiting | None:
    reason, message = rank.waiting_reason or "", rank.waiting_message or ""
    if not reason.startswith("Init:"):
        return None
    failure = parse_failure(message)
    if failure is None:
        return Waiting(f"an init container failed ({reason}): {message}", "`vdk execute --logs` shows its output")
    problem, fix = failure
    return Waiting(f"the data step failed ({reason}): {problem.strip()}", re.sub(r"\s+", " ", fix).strip() or None)
