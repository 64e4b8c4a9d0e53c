"""NVIDIA's names as a run meets them: the resources its device plugin offers (whole GPUs, MIG slices), the node
label its GPU feature discovery sets, the MIG profile grammar (`[Cc.]Gg.Mgb[+me]`), how many slices a GPU has, and
the profiles of each GPU model as NVIDIA's MIG user guide lists them.

Read by the spec (gpus_per_node), the manifests, GPU-hours, the sizing advice and the GPU sampler in the pods
(runtime/nvml_devices.py). Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"  # whole GPUs; also the taint key of GPU nodes
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # + a profile: one MIG slice (the device plugin's mixed strategy)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # a node's GPU model (`NVIDIA-H100-80GB-HBM3`)

# A MIG profile: `3g.40gb` (3 compute slices and 40 GB of one GPU), `1c.3g.40gb` (a compute instance of 1 of those
# slices), `1g.10gb+me` (with the media engines).
MIG_PROFILE_TEXT = r"(?:(?P<compute>[0-9]+)c\.)?(?P<slices>[0-9]+)g\.(?P<memory>[0-9]+)gb(?P<media>\+me)?"
MIG_PROFILE = re.compile(rf"^{MIG_PROFILE_TEXT}$")
# Compute slices of a whole GPU: the A100, H100, H200, B200 and GB200 have 7; these profiles exist only on GPUs with
# fewer (the A30's 4, ...).
SLICES = 7
FEWER_SLICES = {"1g.6gb": 4, "2g.12gb": 4, "4g.24gb": 4, "4g.96gb": 4, "1g.16gb": 2, "2g.32gb": 2}


@dataclass(frozen=True)
class MigName:
    """A MIG profile's name, read."""

    compute: int  # compute slices used (those of the GPU instance unless `Cc.` says fewer)
    slices: int  # the GPU instance's slices
    gigabytes: int
    media: bool  # `+me`

    @property
    def gpu_instance(self) -> str:
        """The GPU instance's profile: `3g.40gb` of `1c.3g.40gb+me`."""
        return f"{self.slices}g.{self.gigabytes}gb"

    @property
    def gpu_slices(self) -> int:
        """The compute slices of the whole GPU that has this profile."""
        return FEWER_SLICES.get(self.gpu_instance, SLICES)

    @property
    def share(self) -> float:
        """The share of a whole GPU it is: its compute slices of the GPU's (`3g.40gb`: 3/7, A30's `2g.12gb`: 2/4)."""
        return self.compute / self.gpu_slices


def mig_name(profile: str) -> MigName | None:
    """`profile` read (`1c.3g.40gb+me`), None when it is not a MIG profile."""
    match = MIG_PROFILE.match(profile)
    if match is None:
        return None
    slices = int(match["slices"])
    compute = int(match["compute"]) if match["compute"] else slices
    return MigName(compute, slices, int(match["memory"]), bool(match["media"]))


def mig_resource(profile: str) -> str:
    """The extended resource of one slice of `profile`: `nvidia.com/mig-1g.10gb`."""
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def mig_profile_of(resource: str | None) -> str | None:
    """The profile of a MIG slice's resource (`nvidia.com/mig-1g.10gb`: `1g.10gb`), None for any other."""
    if not resource or not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    return resource[len(MIG_RESOURCE_PREFIX) :]


# --- the profiles of each GPU model ---------------------------------------------------------------------

GIB = 1 << 30


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile of a GPU model."""

    name: str  # "1g.10gb"
    slices: int  # compute slices (of SLICES)
    memory: int  # usable bytes

    @property
    def share(self) -> float:
        return self.slices / SLICES


def _table(*rows: tuple[str, int, float]) -> tuple[Profile, ...]:
    return tuple(Profile(name, slices, int(gib * GIB)) for name, slices, gib in rows)


# By model, as NVIDIA's MIG user guide lists them (usable memory).
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
# (label, a pattern of the name NVML reports for the model, its profiles), the first match wins.
PROFILES_BY_MODEL: tuple[tuple[str, str, tuple[Profile, ...]], ...] = (
    ("A100-40GB", r"A100.*40\s*GB", A100_40GB),
    ("A100-80GB", r"A100", A100_80GB),
    ("H100-94GB", r"H100.*(94|96)\s*GB|H100 NVL", H100_94GB),
    ("H100-80GB", r"H100|H800", H100_80GB),
    ("H200-141GB", r"H200", H200_141GB),
)
