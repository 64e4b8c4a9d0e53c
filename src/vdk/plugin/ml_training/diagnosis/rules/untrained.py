"""A smoke run whose ranks all ended without an optimizer step: it shows nothing about training."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.vocabulary.human_units import counted


def no_step_taken(evidence: Evidence) -> Finding | None:
    local = evidence.local
    if local is None or not local.untrained:
        return None
    gpus, again = local.smoke_gpus, local.again
    virtual = counted(int(gpus), "virtual GPU") if gpus.isdigit() else f"{gpus} virtual GPUs"
    if any(protocol.SPAWNED_NOTHING in r.observed for r in evidence.ranks):
        return local_failure(
            evidence,
            "mp.spawn was asked for 0 processes: check how the script computes nprocs (the smoke run's node has "
            f"{virtual}, `smoke_processes` in [ml-training]). Then {again}",
        )
    return local_failure(
        evidence,
        "a smoke run passes once every rank reaches optimizer.step() of a torch.optim optimizer. Check whether the "
        f"script needs more GPUs than the smoke run's node has ({virtual}: raise "
        "`smoke_processes` in "
        "[ml-training] for more), returns early (an argument, an empty dataset), or steps an optimizer that is not "
        f"a torch.optim.Optimizer. Then {again}",
    )
