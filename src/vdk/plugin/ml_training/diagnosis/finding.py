"""What a diagnosis says, and the shapes of the rules that say it.

A finding is what a user must know: why the run waits or why it failed, which ranks, and the fix. Rules
come in a few shapes, one per question the engine (`diagnosis/engine.py`) asks; the rule list
(`diagnosis/rules/__init__.py`) holds each rule in the order it is asked. The helpers below are what
rules share: how a cluster rank's failure is worded, and the evidence a local or a cluster rule reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import NamedTuple

from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import Ending
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.runtime.idle_policy import Idle
from vdk.plugin.ml_training.runtime.watchdog import Stall

WAITING = "waiting"
FAILED = "failed"
ADVICE = "advice"  # what to change so that the next run uses its GPUs (diagnosis/sizing.py)


@dataclass(frozen=True)
class Finding:
    """Something a user must know: why the run waits (`waiting`), why it failed (`failed`), or what to change
    so that the next run uses its GPUs (`advice`)."""

    kind: str  # WAITING | FAILED | ADVICE
    what: str
    fix: str | None = None
    ranks: list[str] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    log_source: str | None = None  # "rank 1, pod x, previous container"
    hints: list[str] = field(default_factory=list)  # what well-known errors (in the log, in the error) mean
    stall: Stall | None = None  # the rank the stall watchdog stopped: how long, where it was
    idle: Idle | None = None  # the node the idle policy stopped: how long, where it was

    def to_dict(self) -> dict:
        out = asdict(self)
        out["stall"] = self.stall.to_dict() if self.stall is not None else None
        out["idle"] = self.idle.to_dict() if self.idle is not None else None
        return out


class Fix(NamedTuple):
    """What to do (`advice`) when a message matches `pattern` (a regular expression)."""

    pattern: str
    advice: str


def fix_for(message: str, table: tuple[Fix, ...]) -> str | None:
    """The advice of the first entry of `table` whose pattern is in `message` (any case)."""
    for fix in table:
        if re.search(fix.pattern, message or "", re.IGNORECASE):
            return fix.advice
    return None


class Waiting(NamedTuple):
    """Why one rank does not run (yet), and what to do (None: nothing, it is on its way)."""

    what: str
    fix: str | None


# Why the run failed: the first rule of the list that answers.
FailureRule = Callable[[Evidence], "Finding | None"]
# Why a run waits, asked of the run as a whole (Kueue; no pods at all).
RunWaitingRule = Callable[[Evidence], "Finding | None"]
# Why one rank waits: the first rule of the list that answers.
RankWaitingRule = Callable[[RankEvidence], "Waiting | None"]
# What a Python error a local rank reported means beyond its fix (a note beside its traceback), said for the run it
# was (smoke or full, on the CPU stand-ins or not).
ErrorNote = Callable[["Mapping[str, Any] | None", LocalFacts], "str | None"]


def rank_failure(blame: Blame, what: str, fix: str | None) -> Finding:
    """A cluster rank's failure, said as `vdk show` says it: "rank 1 (pod x) <what> (restarted 3 times)"."""
    rank = blame.rank
    restarted = f" (restarted {rank.restarts} times)" if rank.restarts else ""
    return Finding(
        FAILED,
        f"rank {rank.rank} (pod {rank.pod}) {what}{restarted}",
        fix,
        [rank.rank],
        log_source=log_source(blame),
    )


def log_source(blame: Blame) -> str:
    """Whose log explains the failure: "rank 1, pod x" (", previous container" after a restart)."""
    return f"rank {blame.rank.rank}, pod {blame.rank.pod}" + (", previous container" if blame.previous else "")


def local_failure(evidence: Evidence, fix: str) -> Finding:
    """A local run's failure: what its outcome says happened, and the fix."""
    assert evidence.local is not None
    blame = evidence.blame
    return Finding(
        FAILED,
        evidence.local.headline,
        fix,
        [blame.rank.rank] if blame is not None else [],
        stall=blame.stall if blame is not None else None,
    )


def reported_error(evidence: Evidence) -> tuple[LocalFacts, Blame, Mapping[str, Any]] | None:
    """(the local run's facts, its blame, the Python error the blamed rank reported), if it reported one."""
    blame = evidence.blame
    if evidence.local is None or blame is None or not blame.rank.error:
        return None
    return evidence.local, blame, blame.rank.error


def container_ending(evidence: Evidence) -> tuple[Blame, Ending] | None:
    """(the cluster run's blame, how its container ended) when a container failed, not the stall watchdog."""
    blame = evidence.blame
    if evidence.cluster is None or blame is None or blame.stall is not None or blame.ending is None:
        return None
    return blame, blame.ending
