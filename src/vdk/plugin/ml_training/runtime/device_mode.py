"""The device mode: the rules by which tensors on the virtual GPUs are CPU tensors that remember the GPU
the code put them on (device_marks.py), and fail where CUDA would. device_tracking.py installs it.

One TorchFunctionMode sees every torch call of the process. It places tensors meant for a GPU (`.to()`,
`.cuda()`, `device=` of factories, `torch.device("cuda")` blocks) in CPU memory and, with tracking on,
marks each tensor with its device: a GPU index, or the CPU. Marks travel with results. A call that CUDA
rejects raises CUDA's own error at the user's line: non-scalar CPU and GPU tensors mixed, two GPUs mixed,
`.numpy()` of a GPU tensor. The rules are those of `FakeTensor._find_common_device` (torch/_subclasses/
fake_tensor.py), which is what torch applies on CUDA:

- a 0-dim CPU tensor (and a Python number) goes with tensors of any device;
- indexing (`x[i]`, `x[i] = v`, index_put) takes index tensors from the CPU, and copies (`copy_`, `to`,
  `type_as`, `new_*`) cross devices by design;
- a tensor whose device is not known (made by C++ code the mode does not see: autograd, collectives,
  DataLoader workers, checkpoints loaded without map_location) goes with anything: when unsure, let it
  pass, since a false alarm is worse than a miss.

`.device`, `.is_cuda` and `get_device()` of a marked tensor name its GPU, so that code deriving devices
from tensors (`torch.zeros(n, device=x.device)`) keeps them consistent.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from vdk.plugin.ml_training.runtime.device_marks import CPU_TAG
from vdk.plugin.ml_training.runtime.device_marks import TAG
from vdk.plugin.ml_training.runtime.device_marks import mark
from vdk.plugin.ml_training.runtime.device_marks import mismatch
from vdk.plugin.ml_training.runtime.device_marks import numpy_of_gpu_tensor
from vdk.plugin.ml_training.runtime.device_marks import with_device_suffix
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.virtual_gpu.devices import VirtualGPUs

CPU = torch.device("cpu")
_SAME = object()  # Tensor.to without a device: the result stays where the tensor is
PLACED = "cuda tensors -> CPU memory (devices tracked)"
PLACED_UNTRACKED = "cuda tensors -> CPU memory (smoke_device_tracking off)"
Tensor = torch.Tensor
_PACKAGE = __name__.rpartition(".")[0]
# The modules of the frames between a handled call and its caller: the device tracking's own (this mode,
# its marks, its patches of torch) and torch's dispatch to the mode.
_HANDLING = (__name__, f"{_PACKAGE}.device_marks", f"{_PACKAGE}.device_tracking", "torch.overrides")

# Torch functions that make a tensor out of no tensor: without `device=` it is on the CPU.
_FACTORY_NAMES = (
    "tensor as_tensor asarray scalar_tensor zeros ones empty full rand randn randint randperm arange range "
    "linspace logspace eye empty_strided tril_indices triu_indices hann_window hamming_window blackman_window "
    "bartlett_window kaiser_window sparse_coo_tensor frombuffer"
).split()


def _factories() -> frozenset:
    """Torch functions that make a tensor out of no tensor: on the default device unless `device=`."""
    from torch.utils._device import _device_constructors

    named = {getattr(torch, n) for n in _FACTORY_NAMES if hasattr(torch, n)}
    return frozenset(named | set(_device_constructors()))


class DeviceTracker(TorchFunctionMode):
    """Puts GPU tensors in CPU memory; with `track`, marks and checks their devices (module docstring)."""

    def __init__(self, gpus: VirtualGPUs, adaptations: Adaptations, track: bool):
        super().__init__()
        self.gpus = gpus
        self.adaptations = adaptations
        self.track = track
        self.placed = PLACED if track else PLACED_UNTRACKED
        self._factories = _factories()
        self.default: int | None = None  # the GPU torch.set_default_device("cuda") chose
        self._handlers = self._make_handlers()

    def _make_handlers(self) -> dict[Any, Any]:
        # Any: torch hands __torch_function__ the properties' __get__/__set__, which its stubs type as plain values.
        T: Any = Tensor
        handlers: dict[Any, Any] = {
            T.to: self._to,
            T.cuda: self._cuda,
            T.pin_memory: lambda func, args, kwargs: args[0],
            T.record_stream: lambda func, args, kwargs: None,
            torch._C._nn._parse_to: self._parse_to,
            torch.device: self._device_of_index,
        }
        if not self.track:
            return handlers
        plain = self._plain
        for func in (
            T.shape.__get__,
            T.dtype.__get__,
            T.ndim.__get__,
            T.requires_grad.__get__,
            T.grad_fn.__get__,
            T.is_leaf.__get__,
            T.layout.__get__,
            T.size,
            T.dim,
            T.numel,
            T.__len__,
            T.stride,
            T.is_floating_point,
            T.is_complex,
            T.is_contiguous,
            T.element_size,
            T.item,
            T.tolist,
            T.data_ptr,
            T.__setitem__,
            T.__bool__,
            T.__float__,
            T.__int__,
            T.__index__,
            T.__format__,
        ):
            handlers[func] = plain
        same = self._same_as_self
        for func in (
            T.__getitem__,
            T.copy_,
            T.index_put_,
            T.index_put,
            torch.index_put,
            T.masked_select,
            T.repeat_interleave,
            torch.repeat_interleave,
            T.__deepcopy__,
        ):
            handlers[func] = same
        for name in ("new_tensor", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"):
            handlers[getattr(T, name)] = self._new
        handlers.update(
            {
                T.cpu: self._cpu,
                T.type_as: self._type_as,
                T.numpy: self._numpy,
                T.__array__: self._numpy,
                T.device.__get__: self._device,
                T.is_cuda.__get__: self._is_cuda,
                T.is_cpu.__get__: self._is_cpu,
                T.get_device: self._get_device,
                T.grad.__get__: self._grad,
                T.data.__set__: self._set_data,
                T.set_: self._set,
                T.__reduce_ex__: self._reduce_ex,
                T.__repr__: self._repr,
            }
        )
        for name in dir(torch):
            if name.startswith(("_foreach_", "_fused_")):
                handlers[getattr(torch, name)] = self._foreach
        return handlers

    # --- the hot path ---------------------------------------------------------------------------

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = self._handlers.get(func)
        if handler is None:
            handler = self._handlers[func] = self._classify(func)
        return handler(func, args, kwargs or {})

    def _classify(self, func) -> Any:
        """The handler of a function seen for the first time: backward passes run their hooks (FSDP's,
        checkpointing's recomputation) inside the mode; torch's private functions (metadata helpers
        that torch's own Python code calls) are not checked; any other call is."""
        name = getattr(func, "__name__", "") or ""
        if name in ("backward", "grad") and getattr(func, "__module__", "").startswith(("torch", "vdk")):
            return self._with_mode
        if not self.track:
            return self._untracked
        if name.startswith("_") and not name.startswith("__"):
            return self._unchecked
        return self._checked

    def _with_mode(self, func, args, kwargs):
        """torch pauses a mode while its handler runs, so the hooks of a backward pass (FSDP's
        all-gathers, recomputation of checkpointed activations) would run without it. The backward
        pass runs with the mode on again; torch.autograd's own check for a mode is skipped meanwhile,
        or it would hand the call straight back to this handler."""
        import torch.autograd as autograd

        if func is autograd.grad:
            call, call_args = autograd.grad, args
        elif func is autograd.backward:
            call, call_args = autograd.backward, args
        else:  # Tensor.backward(gradient=None, retain_graph=None, create_graph=False, inputs=None)
            call, call_args = autograd.backward, args[:1]
            names = ("gradient", "retain_graph", "create_graph", "inputs")
            kwargs = {**dict(zip(names, args[1:], strict=False)), **kwargs}
            kwargs["grad_tensors"] = kwargs.pop("gradient", None)
        check = autograd.has_torch_function
        autograd.has_torch_function = _no_torch_function
        try:
            with self:
                return call(*call_args, **kwargs)
        finally:
            autograd.has_torch_function = check

    def _untracked(self, func, args, kwargs):
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                return self._placed(func, args, kwargs, device)
        return func(*args, **kwargs)

    def _unchecked(self, func, args, kwargs):
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                return self._placed(func, args, kwargs, device)
        out = func(*args, **kwargs)
        if args and isinstance(args[0], Tensor):
            mark(out, args[0].__dict__.get(TAG))
        return out

    def _checked(self, func, args, kwargs):
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                return self._placed(func, args, kwargs, device)
        elif len(args) == 1 and isinstance(args[0], Tensor):  # x.relu(), x.view(...) without arguments
            out = func(*args)
            tag = args[0].__dict__.get(TAG)
            if tag is not None:
                mark(out, tag)
            return out
        common = None  # the device of the first tensor that decides it (any but a 0-dim CPU tensor)
        unknown = found = False
        for group in (args, kwargs.values()):
            for value in group:
                tensors: Sequence[Any]  # a list's items are checked one by one
                if isinstance(value, Tensor):
                    tensors = (value,)
                elif type(value) in (list, tuple) and value and isinstance(value[0], Tensor):
                    tensors = value
                else:
                    continue
                for tensor in tensors:
                    if not isinstance(tensor, Tensor):
                        continue
                    found = True
                    tag = tensor.__dict__.get(TAG)
                    if tag is None:
                        unknown = True
                    elif tag == CPU_TAG and tensor.dim() == 0:
                        continue  # CUDA kernels take CPU scalars
                    elif common is None:
                        common = tag
                    elif tag != common:
                        raise mismatch(common, tag)
        out = func(*args, **kwargs)
        if common is not None:
            mark(out, common)
        elif found:
            if not unknown:
                mark(out, CPU_TAG)  # only CPU scalars went in
        elif func in self._factories:
            mark(out, CPU_TAG if self.default is None else self.default)
        return out

    # --- placement ------------------------------------------------------------------------------

    def target(self, device: Any) -> int | None:
        """The device tag `device` names: a GPU index for CUDA, CPU_TAG for the CPU, None for others (meta)."""
        if isinstance(device, torch.device):
            kind = device.type
        elif isinstance(device, str):
            kind = device.split(":", 1)[0].strip().lower()
        elif isinstance(device, int) and not isinstance(device, bool):
            kind = "cuda"
        else:
            return None
        if kind == "cuda":
            return self.gpus.index(device if not isinstance(device, str) else device.strip().lower())
        return CPU_TAG if kind == "cpu" else None

    def _placed(self, func, args, kwargs, device):
        """A call with `device=`: a factory, `*_like`, `new_*`, or `Tensor.to(device=...)`."""
        target = self.target(device)
        if target is None:
            return func(*args, **kwargs)
        if target >= 0:
            self.adaptations.note(self.placed)
            kwargs = dict(kwargs, device=CPU)
        out = func(*args, **kwargs)
        if self.track:
            mark(out, target)
        return out

    def _to(self, func, args, kwargs):
        """tensor.to(device | dtype | other, ...): a GPU copy is a new CPU tensor marked with its GPU."""
        source, rest, kwargs = args[0], list(args[1:]), dict(kwargs)
        target: Any = _SAME
        if rest and isinstance(rest[0], Tensor):
            target = rest[0].__dict__.get(TAG)  # to(other): other's device (None: not known)
        else:
            positional = bool(rest) and rest[0] is not None and not isinstance(rest[0], torch.dtype)
            device = rest[0] if positional else kwargs.get("device")
            if device is not None:
                target = self.target(device)
                if target is None:  # meta and other devices: torch's business
                    return func(*args, **kwargs)
                if target >= 0:
                    self.adaptations.note(self.placed)
                    if positional:
                        rest[0] = CPU
                    else:
                        kwargs["device"] = CPU
        if not self.track:
            return func(source, *rest, **kwargs)
        own = source.__dict__.get(TAG)
        if target is _SAME or target is None:  # a dtype change, or a device that is not known
            out = func(source, *rest, **kwargs)
            if out is not source and target is _SAME:
                mark(out, own)
            return out
        if target != own and not (target == CPU_TAG and own is None):
            kwargs["copy"] = True  # the GPU copy must not be the CPU original, nor the reverse
        out = func(source, *rest, **kwargs)
        if target == CPU_TAG and own is not None and own >= 0 and _called_from_distributed():
            return out  # DTensor's CPU mesh holds what the code sees as GPU tensors: not known
        if out is not source or target == own:
            mark(out, target)
        return out

    def _device_of_index(self, func, args, kwargs):
        """torch.device(1): a bare index names the accelerator's device, here a virtual GPU."""
        if len(args) == 1 and not kwargs and _is_index(args[0]):
            return self.gpus.device(self.gpus.index(args[0]))
        return func(*args, **kwargs)

    def _parse_to(self, func, args, kwargs):
        """Module.to(1): a bare index names an accelerator, which the CPU build of torch does not have."""
        if args and _is_index(args[0]):
            args = (self.gpus.device(self.gpus.index(args[0])), *args[1:])
        if _is_index(kwargs.get("device")):
            kwargs = dict(kwargs, device=self.gpus.device(self.gpus.index(kwargs["device"])))
        return func(*args, **kwargs)

    def _cuda(self, func, args, kwargs):
        source = args[0]
        device = args[1] if len(args) > 1 else kwargs.get("device")
        target = self.gpus.index(device)
        self.adaptations.note(self.placed)
        options = {"non_blocking": kwargs.get("non_blocking", False)}
        if "memory_format" in kwargs:
            options["memory_format"] = kwargs["memory_format"]
        if not self.track:
            return Tensor.to(source, CPU, **options)
        if source.__dict__.get(TAG) == target:
            return source
        out = Tensor.to(source, CPU, copy=True, **options)
        mark(out, target)
        return out

    def _cpu(self, func, args, kwargs):
        source = args[0]
        own = source.__dict__.get(TAG)
        if own is not None and own >= 0:
            out = Tensor.to(source, CPU, copy=True, **kwargs)
            mark(out, CPU_TAG)
            return out
        return func(*args, **kwargs)

    def _type_as(self, func, args, kwargs):
        return self._to(Tensor.to, args, kwargs)

    def _new(self, func, args, kwargs):
        """tensor.new_*(...): on the tensor's device unless `device=` says otherwise; data may be anywhere."""
        device = kwargs.get("device")
        if device is not None:
            return self._placed(func, args, kwargs, device)
        out = func(*args, **kwargs)
        mark(out, args[0].__dict__.get(TAG))
        return out

    # --- what a tensor says about its device ----------------------------------------------------

    def _device(self, func, args, kwargs):
        tag = args[0].__dict__.get(TAG)
        if tag is not None and tag >= 0:
            return self.gpus.devices[tag]
        return func(*args)

    def _is_cuda(self, func, args, kwargs):
        tag = args[0].__dict__.get(TAG)
        return True if tag is not None and tag >= 0 else func(*args)

    def _is_cpu(self, func, args, kwargs):
        tag = args[0].__dict__.get(TAG)
        return False if tag is not None and tag >= 0 else func(*args)

    def _get_device(self, func, args, kwargs):
        tag = args[0].__dict__.get(TAG)
        return tag if tag is not None and tag >= 0 else func(*args)

    def _numpy(self, func, args, kwargs):
        tag = args[0].__dict__.get(TAG)
        if tag is not None and tag >= 0 and not kwargs.get("force"):
            raise numpy_of_gpu_tensor(tag)
        return func(*args, **kwargs)

    def _repr(self, func, args, kwargs):
        text = func(*args, **kwargs)
        tag = args[0].__dict__.get(TAG)
        if tag is None or tag < 0:
            return text
        return with_device_suffix(text, f"device='cuda:{tag}'")

    # --- tensors made by C++ code that the mode does not see ------------------------------------

    def _grad(self, func, args, kwargs):
        """A gradient that autograd accumulated is on its parameter's device."""
        grad = func(*args)
        if grad is not None and TAG not in grad.__dict__:
            mark(grad, args[0].__dict__.get(TAG))
        return grad

    def _set_data(self, func, args, kwargs):
        """`param.data = converted` (Module.to/cuda): the parameter is now where `converted` is."""
        target, value = args[0], args[1]
        func(target, value)
        tag = value.__dict__.get(TAG) if isinstance(value, Tensor) else None
        if tag is None:
            target.__dict__.pop(TAG, None)
        else:
            mark(target, tag)

    def _set(self, func, args, kwargs):
        out = func(*args, **kwargs)
        source = args[1] if len(args) > 1 else kwargs.get("source")
        if isinstance(source, Tensor):
            tag = source.__dict__.get(TAG)
            if tag is None:
                args[0].__dict__.pop(TAG, None)
            else:
                mark(args[0], tag)
        return out

    def _same_as_self(self, func, args, kwargs):
        """Calls that mix devices by design; the result is on the tensor's own device."""
        out = func(*args, **kwargs)
        mark(out, args[0].__dict__.get(TAG) if isinstance(args[0], Tensor) else None)
        return out

    def _foreach(self, func, args, kwargs):
        """torch._foreach_*/_fused_*: torch's optimizers call them on tensors grouped by their real device;
        each result is on the device of its tensor in the first list."""
        out = func(*args, **kwargs)
        if isinstance(out, (list, tuple)) and args and isinstance(args[0], (list, tuple)):
            for result, tensor in zip(out, args[0], strict=False):
                if isinstance(tensor, Tensor):
                    mark(result, tensor.__dict__.get(TAG))
        return out

    def _reduce_ex(self, func, args, kwargs):
        """Pickling (torch.save): the mark is the smoke run's, not part of the user's checkpoint."""
        tensor = args[0]
        tag = tensor.__dict__.pop(TAG, None)
        try:
            return func(*args, **kwargs)
        finally:
            if tag is not None:
                tensor.__dict__[TAG] = tag

    @staticmethod
    def _plain(func, args, kwargs):
        return func(*args, **kwargs)


def _no_torch_function(*args: Any, **kwargs: Any) -> bool:
    return False


def _called_from_distributed() -> bool:
    """Whether torch.distributed's own code made the call being handled (the handler's caller's caller)."""
    try:
        frame: FrameType | None = sys._getframe(3)
    except ValueError:  # a shallower stack than a handler's: not torch.distributed's call
        return False
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_HANDLING):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").startswith("torch.distributed")


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
