"""/dev/shm too small for the data loader's workers (a Bus error in a rank's log)."""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.finding import Fix

SHM_TOO_SMALL = Fix(
    r"Bus error|No space left on device.*shm|unable to (write to|allocate shared memory)",
    "/dev/shm is too small for the data loader: raise `shm_size` in [ml-training] (or use fewer DataLoader workers)",
)
