"""Device tracking installed in a process (cpu_shims.install): the device mode (device_mode.py) entered
for the rest of the process, and what it does not see patched so that tensors entering from there get
their device (device_marks.py): parameters, numpy arrays, DataLoader batches, checkpoints (torch.load),
tensor subclasses (DTensor), and torch.set_default_device("cuda").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from vdk.plugin.ml_training.runtime.device_marks import CPU_TAG
from vdk.plugin.ml_training.runtime.device_marks import TAG
from vdk.plugin.ml_training.runtime.device_marks import mark
from vdk.plugin.ml_training.runtime.device_marks import mark_tree
from vdk.plugin.ml_training.runtime.device_mode import DeviceTracker
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import with_arguments
from vdk.plugin.ml_training.runtime.virtual_gpu.devices import VirtualGPUs

CPU = torch.device("cpu")
Tensor = torch.Tensor


def _tagged_sources(a: Adaptations, tracker: DeviceTracker) -> None:
    """Tensors that enter from outside the mode's view get their device: parameters, numpy arrays,
    DataLoader batches, checkpoints."""
    from torch.nn.parameter import Parameter

    original_new = Parameter.__new__

    def parameter(cls, data=None, requires_grad=True):
        param = original_new(cls, data, requires_grad)
        if isinstance(data, Tensor):
            mark(param, data.__dict__.get(TAG))
        return param

    a.replace(Parameter, "__new__", lambda original: staticmethod(parameter))

    def from_numpy(original):
        def wrapper(array):
            tensor = original(array)
            mark(tensor, CPU_TAG)
            return tensor

        return wrapper

    a.replace(torch, "from_numpy", from_numpy)

    from torch.utils.data.dataloader import _BaseDataLoaderIter

    def batches(original):
        @functools.wraps(original)
        def __next__(self):
            batch = original(self)
            mark_tree(batch, CPU_TAG, only_unmarked=True)  # workers' batches arrive pickled, unmarked
            return batch

        return __next__

    a.replace(_BaseDataLoaderIter, "__next__", batches)


def _wrapper_subclasses(a: Adaptations) -> None:
    """Tensor subclasses (DTensor) are made with the device their data claims (`local.device`), which
    is a virtual GPU's: the wrapper itself lives in CPU memory like its data."""

    def make(original):
        def _make_wrapper_subclass(cls, *args, **kwargs):
            device = kwargs.get("device")
            if device is not None and str(getattr(device, "type", device)).split(":")[0] == "cuda":
                kwargs["device"] = CPU
            return original(cls, *args, **kwargs)

        return staticmethod(_make_wrapper_subclass)

    a.replace(Tensor, "_make_wrapper_subclass", make)


def _default_device(a: Adaptations, tracker: DeviceTracker) -> None:
    """torch.set_default_device("cuda"): factories make tensors of that virtual GPU. torch keeps its
    default device in a mode at the bottom of the stack, below this one: it stays the CPU, and the
    tracker marks what factories make."""

    def set_default(original):
        def set_default_device(device: Any) -> None:
            target = tracker.target(device) if device is not None else None
            if target is not None and target >= 0:
                tracker.adaptations.note(tracker.placed)
                tracker.default = target
                return original(None)
            tracker.default = None
            return original(device)

        return set_default_device

    def get_default(original):
        def get_default_device() -> torch.device:
            if tracker.default is not None:
                return tracker.gpus.device(tracker.default)
            return original()

        return get_default_device

    a.replace(torch, "set_default_device", set_default)
    a.replace(torch, "get_default_device", get_default)


def _checkpoints(a: Adaptations, tracker: DeviceTracker) -> None:
    """torch.load reads into CPU memory; the tensors are marked with the device `map_location` names
    (a GPU, the CPU), and left unmarked when it names none: they return to where they were saved."""
    targets: list[int | None] = []

    def to_cpu(arguments: dict) -> None:
        targets.append(_location_target(tracker, arguments.get("map_location")))
        arguments["map_location"] = CPU

    def load(original):
        bound = with_arguments(original, to_cpu)

        def torch_load(*args, **kwargs):
            depth = len(targets)
            try:
                result = bound(*args, **kwargs)
                if tracker.track and len(targets) > depth:
                    mark_tree(result, targets[depth])
                return result
            finally:
                del targets[depth:]

        return torch_load

    a.replace(torch, "load", load)


def _location_target(tracker: DeviceTracker, location: Any) -> int | None:
    if location is None or callable(location) or isinstance(location, Mapping):
        return None
    try:
        return tracker.target(location)
    except Exception:  # noqa: BLE001 - torch.load reports a bad map_location itself
        return None


def install(a: Adaptations, gpus: VirtualGPUs, track: bool) -> DeviceTracker:
    """Enter the device mode for the rest of this process (the caller keeps it for uninstalling)."""
    tracker = DeviceTracker(gpus, a, track)
    _checkpoints(a, tracker)
    _default_device(a, tracker)
    if track:
        _tagged_sources(a, tracker)
        _wrapper_subclasses(a)
    tracker.__enter__()
    return tracker
