"""NCCL communication between a cluster run's ranks failed (its errors in a rank's log)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.finding import Fix

NCCL_FAILED = Fix(
    r"NCCL (error|WARN)|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|NCCL communicator was aborted",
    "NCCL communication between ranks failed: "
    "set NCCL_DEBUG=INFO in [ml-training.env] and look at the first rank that failed",
)
