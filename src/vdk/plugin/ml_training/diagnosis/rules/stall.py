"""A rank that took no optimizer step for `stall_timeout` (or its first for `startup_timeout`): the stall
watchdog (runtime/watchdog.py) stopped it and said where every thread was."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import log_source


def stalled(evidence: Evidence) -> Finding | None:
    blame = evidence.blame
    if blame is None or blame.stall is None:
        return None
    if evidence.local is not None:
        return local_failure(evidence, stall_fix(f"see where {blame.rank.label} was (above)", evidence.local.again))
    stall, rank = blame.stall, blame.rank
    restarted = f", restarted {rank.restarts} times" if rank.restarts else ""
    if stall.collective:
        fix = (
            f"it waited in {stall.collective} for a rank that never joined: look at the other ranks' logs "
            "(`vdk execute --logs`) for the one that stopped stepping or took another path"
        )
    else:
        fix = (
            "see where it was (below): a data loader or queue that waits forever, a collective that other ranks "
            "never join, a deadlock"
        )
    fix += (
        "; if a step, an evaluation or a checkpoint really takes that long, raise `stall_timeout` "
        "(`startup_timeout` before the first step) in [ml-training]"
    )
    return Finding(
        FAILED,
        f"rank {stall.rank} stalled: {stall.summary()} (pod {rank.pod}{restarted})",
        fix,
        [rank.rank],
        log_source=log_source(blame),
        stall=stall,
    )


def stall_fix(where: str, again: str) -> str:
    """What to do about a local rank that took no optimizer step for stall_timeout."""
    return (
        f"{where}: a data loader or queue that waits forever, a collective that another rank never joins, or a "
        "deadlock. If a step, an evaluation or a checkpoint really takes longer, raise `stall_timeout` "
        f"(`startup_timeout` before the first step) in [ml-training]; 0 turns the watchdog off. Then {again}"
    )
