"""Not all ranks joined the rendezvous in time: some pods could not start or reach rank 0."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.finding import Fix

NOT_ALL_JOINED = Fix(
    r"RendezvousTimeoutError|RendezvousClosedError|DistNetworkError|timed out.*rendezvous|Timed out waiting for",
    "not all ranks joined in time: some pods could not start or reach rank 0 (see why the others waited)",
)
