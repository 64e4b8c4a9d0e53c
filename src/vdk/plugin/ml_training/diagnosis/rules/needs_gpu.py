"""Code that needs a GPU (CUDA, NCCL, bf16 or fp16 mixed precision), run in full on a machine without one: a full
local run has no CPU stand-ins unless VDK_ML_TRAINING_ADAPT_TO_CPU=1 asks for the smoke run's adaptations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error
from vdk.plugin.ml_training.runtime import protocol

_GPU_WORDS = ("cuda", "nccl", "gpu", "accelerator", "bf16", "bfloat16", "fp16", "mixed precision")


def needs_a_gpu(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None:
        return None
    local, _, error = reported
    if local.mode != protocol.FULL or local.gpus or not _names_a_gpu(error):
        return None
    job = local.spec.job_dir
    return local_failure(
        evidence,
        "this code needs a GPU and this machine has none: a full run uses no CPU stand-ins. To train it to the end "
        f"here on CPU, with the smoke run's adaptations (virtual GPUs, gloo for NCCL, full precision): "
        f"`{protocol.ADAPT_TO_CPU}=1 vdk run --full {job}`. Or train it where there are GPUs "
        f"(`vdk deploy -p {job}`), or check it here with the smoke run (`vdk run {job}`)",
    )


def _names_a_gpu(error: Mapping[str, Any]) -> bool:
    text = (error.get("message", "") + error.get("traceback", "")).lower()
    return any(word in text for word in _GPU_WORDS)
