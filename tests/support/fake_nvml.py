"""A fake NVML for the GPU sampler's tests: `fake_nvml.c` built with `cc` into a `libnvidia-ml.so.1` that
plays back scripted readings, so that the real `nvidia-ml-py` binding runs (it loads the library by that
name, looks each function up by name and calls it through ctypes) on a machine without GPUs.

A `Script` describes the GPUs (and MIG slices) and their readings, tick by tick; `environment()` is what a
process needs to load the fake: LD_LIBRARY_PATH to its directory and the script's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
HANG = -1  # a tick's error: the call that takes it never returns (a wedged driver)
CRASH = -2  # a tick's error: the process segfaults in the call that takes it
LIBRARY = "libnvidia-ml.so.1"
GIB = 1 << 30

# Real names and sizes, as NVML reports them.
H100 = ("NVIDIA H100 80GB HBM3", 81559 << 20)
A100 = ("NVIDIA A100-SXM4-80GB", 81920 << 20)
# (profile id, name, compute slices, memory MiB) of the A100-80GB's GPU instance profiles.
A100_PROFILES = ((0, "MIG 1g.10gb", 1, 9728), (1, "MIG 2g.20gb", 2, 19968), (2, "MIG 3g.40gb", 3, 40192),
                 (3, "MIG 4g.40gb", 4, 40192), (4, "MIG 7g.80gb", 7, 80384))  # fmt: skip


def build(directory: Path) -> Path:
    """Compile the fake into `directory` (once); the directory to put on LD_LIBRARY_PATH."""
    library = directory / LIBRARY
    if library.is_file() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return directory
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) to build the fake NVML with: install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{LIBRARY}", "-o", str(library), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
    )
    return directory


@dataclass
class Script:
    """GPUs, MIG slices, profiles and the readings each device plays back."""

    records: list[str] = field(default_factory=list)
    devices: int = 0
    gpus: int = 0

    def gpu(self, name: str, memory: int, uuid: str | None = None, gpm: bool = True, mig: bool = False,
            power: bool = True) -> int:  # fmt: skip
        """A GPU (its NVML index is the order of gpu records); returns its device number for ticks."""
        uuid = uuid or f"GPU-{self.gpus:08d}-fake-0000-0000-000000000000"
        self.records.append(f"gpu\t{name}\t{uuid}\t{memory}\t{int(gpm)}\t{int(mig)}\t{int(power)}")
        self.gpus += 1
        self.devices += 1
        return self.devices - 1

    def mig(self, parent: int, instance: int, name: str, memory: int, uuid: str | None = None) -> int:
        """A MIG slice of the `parent`-th GPU (which must be in MIG mode), GPU instance `instance`."""
        uuid = uuid or f"MIG-{self.devices:08d}-fake-0000-0000-000000000000"
        self.records.append(f"mig\t{parent}\t{instance}\t{name}\t{uuid}\t{memory}")
        self.devices += 1
        return self.devices - 1

    def profiles(self, gpu: int, profiles=A100_PROFILES) -> None:
        for profile_id, name, slices, memory_mib in profiles:
            self.records.append(f"profile\t{gpu}\t{profile_id}\t{name}\t{slices}\t{memory_mib}")

    def tick(self, device: int, sm: float = 0.0, memory: int = 0, power_mw: int = 0, occupancy: float = 0.0,
             error: int = 0, repeat: int = 1) -> None:  # fmt: skip
        for _ in range(repeat):
            self.records.append(f"tick\t{device}\t{sm}\t{occupancy}\t{memory}\t{power_mw}\t{error}")

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(self.records) + "\n")
        return path


def environment(library_dir: Path, script: Path | None, calls: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process that loads the fake (on top of this process's)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = (
        f"{library_dir}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(library_dir)
    )
    if script is not None:
        env["FAKE_NVML_SCRIPT"] = str(script)
    if calls is not None:
        env["FAKE_NVML_CALLS"] = str(calls)
    env.update(extra)
    return env
