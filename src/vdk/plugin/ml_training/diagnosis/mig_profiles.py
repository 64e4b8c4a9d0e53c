"""The MIG profiles a GPU model offers, and the smallest that fits what a run used.

The GPU sampler lists the profiles from NVML where it can (`nvmlDeviceGetGpuInstanceProfileInfo`, in the
GPU line's `profiles`); else the table of NVIDIA's MIG user guide (vocabulary/nvidia.py) answers for the A100, H100
and H200. A MIG slice counts as its share of a GPU by its compute slices (as GPU-hours count it).
"""

from __future__ import annotations

import math
import re

from vdk.plugin.ml_training.vocabulary.nvidia import PROFILES_BY_MODEL
from vdk.plugin.ml_training.vocabulary.nvidia import SLICES
from vdk.plugin.ml_training.vocabulary.nvidia import Profile

# Headroom kept above what a run used: memory peaks differ between runs, and a slice's SMs run at full speed.
MEMORY_HEADROOM = 1.15
ACTIVITY_HEADROOM = 1.2


def profiles_of(model: str, listed: tuple[tuple[str, int, int], ...] = ()) -> tuple[tuple[Profile, ...], str]:
    """(the MIG profiles of a GPU model, where they come from: "NVML" or "the table of <model> profiles");
    ((), "") for a model without MIG (or one the table does not know)."""
    if listed:
        found = tuple(Profile(name, slices, memory) for name, slices, memory in listed if slices <= SLICES)
        if found:
            return tuple(sorted(found, key=lambda p: (p.slices, p.memory))), "NVML"
    for label, pattern, table in PROFILES_BY_MODEL:
        if re.search(pattern, model, re.IGNORECASE):
            return table, f"the table of {label} profiles"
    return (), ""


def profile_named(name: str | None, profiles: tuple[Profile, ...]) -> Profile | None:
    return next((p for p in profiles if p.name == name), None)


def smallest_fit(
    profiles: tuple[Profile, ...], activity_p95: float, memory_peak: int, of_slices: int = SLICES
) -> Profile | None:
    """The smallest profile with the compute slices for `activity_p95` percent of `of_slices` slices and the
    memory for `memory_peak` bytes, each with headroom; None when none does."""
    slices = max(1, math.ceil(of_slices * activity_p95 / 100 * ACTIVITY_HEADROOM - 1e-9))
    memory = memory_peak * MEMORY_HEADROOM
    fitting = [p for p in profiles if p.slices >= slices and p.memory >= memory]
    return min(fitting, key=lambda p: (p.slices, p.memory), default=None)
