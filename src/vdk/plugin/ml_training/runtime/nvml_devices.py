"""The GPUs (or MIG slices) a node's processes were given, read through NVML with NVIDIA's own binding,
`nvidia-ml-py` (imported as `pynvml`, only here and only when the sampler starts).

`open_devices()` finds them: every GPU NVML lists (a pod sees only those it was given), each MIG slice of a
GPU in MIG mode, narrowed to CUDA_VISIBLE_DEVICES when it is set (indexes or `GPU-`/`MIG-` UUIDs) and to the
first `limit`. For each it decides once what its activity is read from: GPM (`SM_UTIL` and `SM_OCCUPANCY`
between two samples; Hopper and later, MIG slices through their GPU instance), else the device utilisation
rate (whole GPUs only), else nothing (MIG slices of older GPUs: memory only). `read()` then gives one
reading of every device; an NVML error propagates (the sampler stops on it).

It also lists the MIG profiles the GPU model offers (`nvmlDeviceGetGpuInstanceProfileInfo`), where NVML
answers, for the sizing advice.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from vdk.plugin.ml_training.runtime import gpu_lines
from vdk.plugin.ml_training.vocabulary.nvidia import MIG_PROFILE_TEXT
from vdk.plugin.ml_training.vocabulary.nvidia import mig_name

# A slice's name as NVML gives it: `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
_MIG_NAME = re.compile(rf"\bMIG\s+(?P<profile>{MIG_PROFILE_TEXT})", re.IGNORECASE)


class NoDevices(Exception):
    """No NVML, no binding, or no GPU to sample: the sampler stays silent."""


@dataclass(frozen=True)
class Reading:
    sm: float | None  # percent
    occupancy: float | None
    memory: int  # bytes in use
    power: float | None  # watts


@dataclass
class Device:
    handle: Any
    name: str
    uuid: str
    memory_total: int
    parent: Any = None  # the GPU of a MIG slice
    instance: int | None = None  # its GPU instance id (GPM of a slice)
    profile: str | None = None
    source: str = gpu_lines.NONE
    power: bool = True
    gpm_samples: list = field(default_factory=list)  # [previous, current] GPM samples
    gpm_taken: bool = False


@dataclass
class DeviceSet:
    """The devices sampled and what they are: the sampler's view of the node's GPUs."""

    nvml: Any
    devices: list[Device]
    model: str
    profiles: tuple[tuple[str, int, int], ...] = ()
    _metrics: Any = None

    @property
    def source(self) -> str:
        """What the devices' activity is read from (the weakest of them, should they differ)."""
        order = [gpu_lines.NONE, gpu_lines.UTIL, gpu_lines.GPM]
        return min((d.source for d in self.devices), key=order.index, default=gpu_lines.NONE)

    @property
    def profile(self) -> str | None:
        return self.devices[0].profile if self.devices else None

    @property
    def memory_total(self) -> int:
        return max((d.memory_total for d in self.devices), default=0)

    def read(self) -> list[Reading]:
        return [self._read(d) for d in self.devices]

    def _read(self, device: Device) -> Reading:
        nvml = self.nvml
        sm = occupancy = None
        if device.source == gpu_lines.GPM:
            sm, occupancy = self._gpm(device)
        elif device.source == gpu_lines.UTIL:
            sm = float(nvml.nvmlDeviceGetUtilizationRates(device.handle).gpu)
        memory = int(nvml.nvmlDeviceGetMemoryInfo(device.handle).used)
        power = None
        if device.power:
            try:
                power = nvml.nvmlDeviceGetPowerUsage(device.handle) / 1000.0
            except nvml.NVMLError_NotSupported:
                device.power = False
        return Reading(sm, occupancy, memory, power)

    def _gpm(self, device: Device) -> tuple[float | None, float | None]:
        nvml = self.nvml
        previous, current = device.gpm_samples
        if device.instance is not None:
            nvml.nvmlGpmMigSampleGet(device.parent, device.instance, current)
        else:
            nvml.nvmlGpmSampleGet(device.handle, current)
        device.gpm_samples = [current, previous]
        if not device.gpm_taken:
            device.gpm_taken = True
            return None, None  # one sample: no interval yet
        metrics = self._metrics
        if metrics is None:
            metrics = self._metrics = nvml.c_nvmlGpmMetricsGet_t()
        metrics.version = nvml.NVML_GPM_METRICS_GET_VERSION
        metrics.numMetrics = 2
        metrics.sample1, metrics.sample2 = previous, current
        metrics.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        metrics.metrics[1].metricId = nvml.NVML_GPM_METRIC_SM_OCCUPANCY
        nvml.nvmlGpmMetricsGet(metrics)
        values = [
            float(m.value) if m.nvmlReturn == nvml.NVML_SUCCESS else None
            for m in (metrics.metrics[0], metrics.metrics[1])
        ]
        return values[0], values[1]

    def close(self) -> None:
        nvml = self.nvml
        for device in self.devices:
            for sample in device.gpm_samples:
                try:
                    nvml.nvmlGpmSampleFree(sample)
                except Exception:  # noqa: BLE001 - closing: nothing more to do about it
                    pass
            device.gpm_samples = []
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - closing: nothing more to do about it
            pass


def open_devices(limit: int | None = None, visible: str | None = None) -> DeviceSet:
    """The node's GPUs as NVML sees them (see the module's docstring); NoDevices when there are none to
    sample or NVML cannot be used."""
    try:
        import pynvml
    except ImportError:
        raise NoDevices("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise NoDevices(f"NVML: {e}") from None
    try:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        devices, model, profiles = _discover(pynvml, limit, shown)
    except pynvml.NVMLError as e:
        _shutdown(pynvml)
        raise NoDevices(f"NVML: {e}") from None
    if not devices:
        _shutdown(pynvml)
        raise NoDevices("no GPU given to this node")
    return DeviceSet(pynvml, devices, model, profiles)


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - closing: nothing more to do about it
        pass


def _discover(nvml, limit: int | None, visible: str | None) -> tuple[list[Device], str, tuple]:
    found: list[Device] = []
    model = ""
    profiles: tuple = ()
    for index in range(nvml.nvmlDeviceGetCount()):
        gpu = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(gpu))
        gpm = _gpm_supported(nvml, gpu)
        slices = _mig_slices(nvml, gpu)
        if slices is None:
            device = Device(gpu, name, _text(nvml.nvmlDeviceGetUUID(gpu)), _total(nvml, gpu))
            device.source = gpu_lines.GPM if gpm else gpu_lines.UTIL
            candidates: list[tuple[str | None, Device]] = [(str(index), device)]
        else:
            candidates = []
            for handle in slices:
                slice_name = _text(nvml.nvmlDeviceGetName(handle))
                match = _MIG_NAME.search(slice_name)
                device = Device(
                    handle,
                    slice_name,
                    _text(nvml.nvmlDeviceGetUUID(handle)),
                    _total(nvml, handle),
                    parent=gpu,
                    instance=nvml.nvmlDeviceGetGpuInstanceId(handle),
                    profile=match["profile"] if match else None,
                    source=gpu_lines.GPM if gpm else gpu_lines.NONE,
                )
                candidates.append((None, device))
        for position, device in candidates:
            if _visible(position, device, visible):
                if not model:
                    model, profiles = name, _profiles(nvml, gpu)
                found.append(device)
    found = found[:limit] if limit else found
    for device in found:
        if device.source == gpu_lines.GPM:
            device.gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
    return found, model, profiles


def none_shown(visible: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES shows this process no GPU at all (`""`, `-1`: CUDA stops at the first invalid
    entry), as `_visible` reads it: there is nothing to sample, whatever the node has."""
    return visible is not None and visible.split(",")[0].strip() in ("", "-1")


def _visible(index: str | None, device: Device, visible: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (indexes or UUIDs; unset: all) names the device."""
    if visible is None:
        return True
    for token in (t.strip() for t in visible.split(",")):
        if not token or token == "-1":
            return False  # CUDA stops at the first invalid entry
        if token.isdigit():
            if index is not None and token == index:
                return True
        elif device.uuid.startswith(token) or device.uuid.startswith(f"GPU-{token}"):
            return True
    return False


def _gpm_supported(nvml, gpu) -> bool:
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice)
    except (nvml.NVMLError, AttributeError):
        return False


def _mig_slices(nvml, gpu) -> list | None:
    """The MIG slices of a GPU in MIG mode this process can see; None when it is not in MIG mode."""
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(gpu)
    except nvml.NVMLError:
        return None
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return None
    out = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
        try:
            out.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i))
        except nvml.NVMLError:  # not there, or not this container's
            continue
    return out


def _profiles(nvml, gpu) -> tuple[tuple[str, int, int], ...]:
    """(profile, compute slices, memory bytes) of every GPU instance profile NVML describes for the GPU."""
    out: dict[str, tuple[str, int, int]] = {}
    for profile_id in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, profile_id)
        except (nvml.NVMLError, AttributeError):
            continue
        name = _text(getattr(info, "name", b"") or b"").replace("MIG", "").strip()
        read = mig_name(name)
        if read is None or name != read.gpu_instance:  # not a plain GPU instance profile (`1g.10gb+me`)
            name = f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"
        out.setdefault(name, (name, int(info.sliceCount), int(info.memorySizeMB) << 20))
    return tuple(sorted(out.values(), key=lambda p: (p[1], p[2])))


def _total(nvml, handle) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
