"""The MIG profiles a GPU model offers, and the smallest that fits what a run used.

The GPU sampler lists the profiles from NVML where it can (`nvmlDeviceGetGpuInstanceProfileInfo`, in the
GPU line's `profiles`); else this table of NVIDIA's MIG user guide answers for the A100, H100 and H200
(`Profile`: name, compute slices of 7, memory). A MIG slice counts as its share of a GPU by its compute slices
(k8s/gpu_hours.py does the same).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

GIB = 1 << 30
SLICES = 7  # compute slices of the A100, H100 and H200
# Headroom kept above what a run used: memory peaks differ between runs, and a slice's SMs run at full speed.
MEMORY_HEADROOM = 1.15
ACTIVITY_HEADROOM = 1.2


@dataclass(frozen=True)
class Profile:
    name: str  # "1g.10gb"
    slices: int  # compute slices
    memory: int  # bytes

    @property
    def share(self) -> float:
        return self.slices / SLICES


def _table(*rows: tuple[str, int, float]) -> tuple[Profile, ...]:
    return tuple(Profile(name, slices, int(gib * GIB)) for name, slices, gib in rows)


# By model (a pattern of the name NVML reports), as NVIDIA's MIG user guide lists them (usable memory).
A100_40GB = _table(("1g.5gb", 1, 4.75), ("2g.10gb", 2, 9.75), ("3g.20gb", 3, 19.62), ("4g.20gb", 4, 19.62),
                   ("7g.40gb", 7, 39.38))  # fmt: skip
A100_80GB = _table(("1g.10gb", 1, 9.5), ("2g.20gb", 2, 19.5), ("3g.40gb", 3, 39.25), ("4g.40gb", 4, 39.25),
                   ("7g.80gb", 7, 78.5))  # fmt: skip
H100_80GB = _table(("1g.10gb", 1, 9.75), ("2g.20gb", 2, 19.75), ("3g.40gb", 3, 39.75), ("4g.40gb", 4, 39.75),
                   ("7g.80gb", 7, 79.5))  # fmt: skip
H100_94GB = _table(("1g.12gb", 1, 11.5), ("2g.24gb", 2, 23.5), ("3g.47gb", 3, 46.5), ("4g.47gb", 4, 46.5),
                   ("7g.94gb", 7, 93.0))  # fmt: skip
H200_141GB = _table(("1g.18gb", 1, 16.5), ("2g.35gb", 2, 32.5), ("3g.71gb", 3, 65.0), ("4g.71gb", 4, 65.0),
                    ("7g.141gb", 7, 130.5))  # fmt: skip
TABLE: tuple[tuple[str, str, tuple[Profile, ...]], ...] = (
    ("A100-40GB", r"A100.*40\s*GB", A100_40GB),
    ("A100-80GB", r"A100", A100_80GB),
    ("H100-94GB", r"H100.*(94|96)\s*GB|H100 NVL", H100_94GB),
    ("H100-80GB", r"H100|H800", H100_80GB),
    ("H200-141GB", r"H200", H200_141GB),
)


def profiles_of(model: str, listed: tuple[tuple[str, int, int], ...] = ()) -> tuple[tuple[Profile, ...], str]:
    """(the MIG profiles of a GPU model, where they come from: "NVML" or "the table of <model> profiles");
    ((), "") for a model without MIG (or one the table does not know)."""
    if listed:
        found = tuple(Profile(name, slices, memory) for name, slices, memory in listed if slices <= SLICES)
        if found:
            return tuple(sorted(found, key=lambda p: (p.slices, p.memory))), "NVML"
    for label, pattern, table in TABLE:
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
