"""A tensor on the wrong device: the smoke run's virtual GPU raised what CUDA raises (runtime/device_tracking.py).
The fix is in the code, or the check is wrong."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error


def device_mismatch(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None or not reported[2].get("virtual_gpu"):
        return None
    local, blame, error = reported
    again = local.again
    if "No CUDA GPUs are available" in error.get("message", ""):
        return local_failure(
            evidence,
            "the job asks for no GPU (`gpus_per_node = 0` in [ml-training]): its nodes have none, so CUDA code fails "
            "there as it does here. Set `gpus_per_node` to the GPUs a node should have, or let the code use the CPU "
            f"when torch.cuda.is_available() is False. Then {again}",
        )
    return local_failure(
        evidence,
        f"a GPU raises this error at the line above ({blame.rank.label}): the smoke run keeps track of which tensors "
        "your code put on a GPU. Move the tensor where the others are (`.to(device)`, `device=` when creating it, "
        "`.cpu()` before `.numpy()`), then "
        f"{again}. If the code is right, the check is wrong: set `smoke_device_tracking = false` in [ml-training] "
        "to turn it off (and please report it)",
    )
