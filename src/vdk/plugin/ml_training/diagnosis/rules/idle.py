"""A node the idle policy stopped (`idle_timeout`): every GPU of it stayed below the idle threshold of SM activity
that long after the first optimizer step (runtime/idle_policy.py), and it said where every thread was."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.runtime.idle_policy import ERROR_TYPE
from vdk.plugin.ml_training.runtime.idle_policy import parse_idle


def stopped_idle(evidence: Evidence) -> Finding | None:
    if evidence.local is not None:
        blame = evidence.blame
        if blame is None or not blame.rank.error or blame.rank.error.get("type") != ERROR_TYPE:
            return None
        return local_failure(evidence, idle_fix(f"see where {blame.rank.label} was (above)", evidence.local.again))
    for rank in evidence.ranks:
        for ending in (rank.ended, rank.previous):
            idle = parse_idle(ending.message.splitlines()) if ending is not None and ending.message else None
            if idle is None:
                continue
            restarted = f", restarted {rank.restarts} times" if rank.restarts else ""
            previous = ", previous container" if ending is rank.previous else ""
            return Finding(
                FAILED,
                f"stopped by idle_timeout: {idle.describe()} (pod {rank.pod}{restarted})",
                idle_fix("see where it was (below)", None),
                [rank.rank],
                log_source=f"rank {rank.rank}, pod {rank.pod}{previous}",
                idle=idle,
            )
    return None


def idle_fix(where: str, again: str | None) -> str:
    """What to do about a run whose GPUs sat idle for idle_timeout."""
    fix = (
        f"the GPUs waited for something: {where} — data loading, an evaluation or a checkpoint upload on the CPU, "
        "a collective that another node never joins. If the run waits like this on purpose, raise `idle_timeout` "
        "in [ml-training] (0 turns the policy off)"
    )
    return f"{fix}. Then {again}" if again else fix
