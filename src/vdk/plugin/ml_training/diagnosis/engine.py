"""The diagnosis engine: the questions asked of a run's evidence, each answered by the rule list
(`diagnosis/rules/__init__.py`). Why a run failed; why a cluster run (or one of its ranks) waits; what
well-known errors in a log tail mean."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from vdk.plugin.ml_training.diagnosis import rules
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.finding import WAITING
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Waiting


def why_failed(evidence: Evidence) -> Finding | None:
    """The failure of a failed (or failing) run: the first failure rule that answers. Locally, the finding's
    hints are what the blamed rank's Python error means beyond the fix (a gloo limit)."""
    for rule in rules.FAILURE:
        finding = rule(evidence)
        if finding is not None:
            return dataclasses.replace(finding, hints=error_notes(evidence)) if evidence.local is not None else finding
    return None


def error_notes(evidence: Evidence) -> list[str]:
    """What the Python error of the blamed rank means beyond its fix."""
    error = evidence.blame.rank.error if evidence.blame is not None else None
    if not error or evidence.local is None:
        return []
    return [note for rule in rules.ERROR_NOTES if (note := rule(error, evidence.local))]


def why_waiting(evidence: Evidence) -> list[Finding]:
    """Why a cluster run that has not finished is not (fully) running yet: Kueue, then the ranks that wait
    (grouped by reason), then why a run has no pods at all."""
    cluster = evidence.cluster
    if cluster is None or cluster.finished:
        return []
    findings = []
    admission = _first(rule(evidence) for rule in rules.ADMISSION)
    if admission is not None:
        findings.append(admission)
    training = [r for r in evidence.ranks if r.index is not None] or list(evidence.ranks)
    groups: dict[Waiting, list[RankEvidence]] = {}
    for rank in training:
        reason = why_rank_waits(rank)
        if reason is not None:
            groups.setdefault(reason, []).append(rank)
    for (what, fix), group in groups.items():
        findings.append(Finding(WAITING, f"{_ranks_text(group)}: {what}", fix, [g.rank for g in group]))
    if not evidence.ranks and admission is None:
        no_pods = _first(rule(evidence) for rule in rules.NO_PODS)
        if no_pods is not None:
            findings.append(no_pods)
    return findings


def why_rank_waits(rank: RankEvidence) -> Waiting | None:
    """Why one rank of a cluster run does not run (yet), and what to do: the first rank rule that answers."""
    return _first(rule(rank) for rule in rules.RANK_WAITING)


def log_hints(lines: list[str]) -> list[str]:
    """What the well-known errors in a log tail mean, first match per kind."""
    text = "\n".join(lines)
    return [hint.advice for hint in rules.LOG_HINTS if re.search(hint.pattern, text)]


def _first(answers: Iterable[Finding | Waiting | None]):
    return next((a for a in answers if a is not None), None)


def _ranks_text(ranks: list[RankEvidence]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0].rank} (pod {ranks[0].pod})"
    return f"ranks {_compress([r.rank for r in ranks])}"


def _compress(ranks: list[str]) -> str:
    """["1", "2", "3", "5"] -> "1-3, 5"."""
    numbers = sorted(int(r) for r in ranks if r.isdigit())
    others = [r for r in ranks if not r.isdigit()]
    spans: list[str] = []
    start = prev = None
    for n in numbers + [None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(spans + others)
