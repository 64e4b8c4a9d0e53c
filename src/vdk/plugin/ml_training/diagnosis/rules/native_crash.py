"""A rank that died without a Python error: a crash in native code (SIGSEGV, SIGABRT), often a CUDA/NCCL
mismatch; locally, any rank that ended without reporting and that no rule before this one explains."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import rank_failure


def crashed(evidence: Evidence) -> Finding | None:
    local, blame = evidence.local, evidence.blame
    if local is not None:
        if blame is None:
            return None
        where = f"its output in {blame.rank.log}" if blame.rank.log else "its output above"
        return local_failure(
            evidence,
            f"see {where}; a rank killed by SIGKILL was most likely out of memory, a SIGSEGV/SIGABRT is a "
            f"crash in native code. Then {local.again}",
        )
    ended = container_ending(evidence)
    if ended is None or ended[1].signal != "SIGSEGV":
        return None
    return rank_failure(
        ended[0],
        f"crashed (SIGSEGV, exit code {ended[1].exit_code})",
        "a native library crashed: often a CUDA/NCCL mismatch between the job's packages and the base image",
    )
