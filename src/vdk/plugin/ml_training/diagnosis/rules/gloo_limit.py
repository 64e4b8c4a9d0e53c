"""A collective or reduce op that gloo, the CPU backend standing in for NCCL in the smoke run, does not
implement: a limit of the CPU check, not a bug of the job."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error
from vdk.plugin.ml_training.diagnosis.rules.emulation_gap import SMOKE_GUARD
from vdk.plugin.ml_training.runtime import protocol

# gloo's answers to what it does not implement: "Backend gloo does not support reduce_scatter_tensor_coalesced",
# "Cannot use ReduceOp.PREMUL_SUM with Gloo"
_GLOO_MISSING = (
    (re.compile(r"Backend gloo does not support ([A-Za-z_]+)"), "the collective {}"),
    (re.compile(r"Cannot use (ReduceOp\.[A-Z_]+) with Gloo"), "{}"),
)


def missing_in_gloo(error: Mapping[str, Any] | None) -> str | None:
    """What the code asked of gloo that gloo does not implement (None: not that)."""
    message = (error or {}).get("message", "")
    for pattern, what in _GLOO_MISSING:
        match = pattern.search(message)
        if match:
            return what.format(match.group(1))
    return None


def gloo_limit(error: Mapping[str, Any] | None) -> str | None:
    """What the smoke run's gloo lacks that NCCL has, said as a limit of the CPU check (None: not that)."""
    what = missing_in_gloo(error)
    if what is None:
        return None
    return (
        f"{what} is not available in gloo, the CPU backend that stands in for NCCL in the smoke run: this is a limit "
        "of the CPU check, not a bug in your code"
    )


def gloo_note(error: Mapping[str, Any] | None, local: LocalFacts) -> str | None:
    """The note beside the traceback, said for the run it is: a smoke run's gloo stands in for NCCL (the check's
    limit); so does a full run's on CPU with the stand-ins (VDK_ML_TRAINING_ADAPT_TO_CPU); a full run without them
    uses gloo because the code chose it."""
    what = missing_in_gloo(error)
    if what is None:
        return None
    if local.mode == protocol.SMOKE:
        return gloo_limit(error)
    if local.stand_ins:
        return (
            f"{what} is not available in gloo, which stands in for NCCL in this full run on CPU "
            f"({protocol.ADAPT_TO_CPU}=1): a limit of those stand-ins, not a bug in your code"
        )
    return f"{what} is not available in gloo, the backend this run's code chose: NCCL, on GPUs, has it"


def not_in_gloo(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    limit = gloo_limit(reported[2]) if reported is not None else None
    if reported is None or limit is None:
        return None
    if reported[0].mode != protocol.SMOKE:  # a full run: no smoke check to keep the call out of
        job = reported[0].spec.job_dir
        return local_failure(
            evidence,
            f"{gloo_note(reported[2], reported[0])}. Train it where NCCL serves it (`vdk deploy -p {job}`), or "
            'on CPU keep the call out of the path the code takes with gloo (`if dist.get_backend() == "nccl":`). '
            f"Then {reported[0].again}",
        )
    return local_failure(
        evidence,
        f"{limit}. Narrowest switch: keep the call out of smoke runs, {SMOKE_GUARD} (smoke runs set "
        f"{protocol.MODE}=smoke; the cluster run is unchanged). `vdk deploy --skip-smoke` skips the whole check "
        f"instead. Then {reported[0].again}",
    )
