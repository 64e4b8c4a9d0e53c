"""Counting optimizer steps and keeping the loss, whatever drives the loop (a plain loop, DDP, HF
Trainer, Accelerate): torch calls global optimizer-step hooks for every `torch.optim.Optimizer`
subclass. A script without a torch.optim optimizer (manual SGD: `p.data.add_(p.grad, alpha=-lr)`) is
counted the way it trains, when asked (`manual_steps`, smoke runs): a backward pass followed by an update
of the parameters it reached is a step. The smoke run stops after `limit` steps (`StepLimit`); progress
reports read the count."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import cast

import torch

from vdk.plugin.ml_training.runtime import rpc_optimizers

# Backward calls kept between two optimizer steps before they are added up on the device: bounds the
# memory of a script that calls backward() without ever stepping a torch optimizer.
_MAX_PENDING = 256


class SmokeStepsReached(SystemExit):
    """Raised right after the last smoke step. A SystemExit, so `except Exception` in user code or
    libraries does not swallow it; the bootstrap catches it."""

    def __init__(self, steps: int):
        super().__init__(0)
        self.steps = steps


class LeaveLoop(SmokeStepsReached):
    """Raised at the smoke run's end of training, where the step that would begin more training was about to be
    taken: it unwinds to the run of the job's loop it names (training_loops.py), which breaks out of it, so that the
    code after the loop runs. Should nothing catch it, it ends the rank as SmokeStepsReached does."""

    def __init__(self, steps: int, frame_id: int, loop_id: int, where: str):
        super().__init__(steps)
        self.frame_id = frame_id
        self.loop_id = loop_id
        self.where = where


# The optimizer that stepped; None for a manual step (no torch optimizer).
StepListener = Callable[["StepCounter", torch.optim.Optimizer | None], None]


class StepCounter:
    """Counts optimizer steps per optimizer and keeps the loss of the last step.

    `steps` counts training steps: an optimizer step on gradients of a new backward() is one, and the
    other optimizers stepping on the same gradients (a model split between two optimizers, a wrapper
    whose step calls an inner optimizer's step) belong to it. So optimizers trained in turn, each on
    its own loss (a GAN's discriminator and generator), count their total. `backwards` counts the
    backward() calls.

    The loss of a step is the sum of the scalars `backward()` was called on since the previous step:
    the objective whose gradient the step applied (the loss itself with one backward per step, the
    whole batch's loss under gradient accumulation, the unscaled loss under a GradScaler). It is kept
    as tensors: reading the value waits for the GPU, so only `loss()` does, never a step.
    """

    def __init__(self, manual_steps: bool = False) -> None:
        self.manual_steps = manual_steps  # count parameter updates without a torch.optim optimizer as steps
        self.steps = 0
        self.backwards = 0
        self.listeners: list[StepListener] = []  # called after every optimizer step
        self.backward_listeners: list[Callable[[StepCounter], None]] = []  # called as a backward pass begins
        self._counts: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = weakref.WeakKeyDictionary()
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self._pending: list[torch.Tensor] = []  # backward() scalars since the last step
        self._last_step: list[torch.Tensor] = []  # those of the last step
        self._scaled: tuple[weakref.ref, torch.Tensor] | None = None  # GradScaler.scale(loss) -> loss
        self._told: torch.Tensor | None = None  # the loss a framework is calling backward() on, before it divided it
        self._pending_told = 0  # backward() scalars since the last step that a framework told (their mean is the loss)
        self._last_told = 0
        self._in_step: set[int] = set()  # ids of the optimizers that stepped on the current gradients
        self._logged: tuple[int, float] | None = None  # (step, loss) a training framework logged
        self._handles: list = []
        self._restore: list = []
        self._updated: ParameterUpdates | None = None  # the parameters of the last backward, without an optimizer

    def install(self) -> StepCounter:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles = [register_optimizer_step_post_hook(self._after_step)]
        self._track_new_optimizers()
        self._record_losses()
        self._see_through_loss_scaling()
        rpc_optimizers.install(self._keep_quietly)
        return self

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._handles, self._restore = [], []

    def reset(self) -> None:
        """Forget the steps and listeners so far (a worker forked from a rank that counted its own)."""
        self.steps = 0
        self.backwards = 0
        self.backward_listeners = []
        self.listeners = []
        self._counts.clear()
        self._in_step, self._logged = set(), None
        self._optimizers.clear()  # in place: Optimizer.__init__'s hook holds this set
        self._pending, self._last_step, self._scaled = [], [], None
        self._told, self._pending_told, self._last_told = None, 0, 0
        self._updated = None

    def count(self, optimizer: torch.optim.Optimizer) -> int:
        return self._counts.get(optimizer, 0)

    def reached(self, limit: int) -> bool:
        """Whether every optimizer took `limit` steps (the script's steps, when it has no optimizer)."""
        optimizers = self.optimizers
        if not optimizers:
            return self.steps >= limit
        return all(self.count(o) >= limit for o in optimizers)

    def settle(self) -> None:
        """The script ended: a manual update after the last backward pass was a step too."""
        updated, self._updated = self._updated, None
        if updated is not None and not self._optimizers and updated.changed():
            self._step_taken()

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer created or stepped since `install()`, while it lives."""
        return list(self._optimizers)

    def log_loss(self, value: float) -> None:
        """The loss a training framework logged for the current step (the Hugging Face Trainer's, which
        differs from what it passes to backward()): `loss()` returns it until the next step."""
        self._logged = (self.steps, value)

    def loss(self) -> float | None:
        """The loss of the last step (of the backward calls so far if none stepped yet), or the one a
        training framework logged for it; waits for the device that computed it."""
        if self._logged is not None and self._logged[0] == self.steps:
            return self._logged[1]
        tensors = self._last_step or self._pending
        told = self._last_told if self._last_step else self._pending_told
        if not tensors:
            return None
        try:
            total = sum(float(_local(t).float()) for t in tensors)
        except Exception:  # noqa: BLE001 - a device in an error state, an exotic tensor: no value
            return None
        return total / told if told else total

    @contextlib.contextmanager
    def unscaled(self, loss: Any) -> Iterator[None]:
        """While a framework calls backward() on `loss` divided by its gradient accumulation steps (Accelerate's
        `backward`): the step's loss is the mean of the losses the script passed, as it computes them."""
        self._told = loss.detach() if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None
        try:
            yield
        finally:
            self._told = None

    def loss_snapshot(self) -> float | tuple[torch.Tensor, ...] | None:
        """What `loss()` would read, without reading it: the logged value, or the tensors to add up later
        (`loss_value`, on another thread: the device is waited for there, not here)."""
        if self._logged is not None and self._logged[0] == self.steps:
            return self._logged[1]
        tensors = self._last_step or self._pending
        return tuple(tensors) if tensors else None

    def _track_new_optimizers(self) -> None:
        original = torch.optim.Optimizer.__init__
        optimizers = self._optimizers

        def __init__(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            optimizers.add(optimizer)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign,assignment]  # patched; _restore puts it back
        self._restore.append((torch.optim.Optimizer, "__init__", original))

    def _record_losses(self) -> None:
        original = torch.Tensor.backward
        counter = self

        def backward(tensor, *args, **kwargs):
            try:
                counter._keep(tensor)
            except Exception:  # noqa: BLE001 - keeping the loss must never break training
                pass
            return original(tensor, *args, **kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
        torch.Tensor.backward = backward  # type: ignore[method-assign,assignment]  # patched; _restore puts it back
        self._restore.append((torch.Tensor, "backward", original))

    @property
    def manual(self) -> bool:
        """Whether the steps are counted as manual updates (no torch optimizer in use)."""
        return self.manual_steps and not self._optimizers

    def _keep_quietly(self, tensor: Any) -> None:
        """A loss another backward than Tensor.backward was called on (dist_autograd.backward, RPC's)."""
        if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
            self._keep(tensor)

    def _keep(self, tensor: torch.Tensor) -> None:
        for begun in self.backward_listeners:
            begun(self)
        if self.manual:
            self._manual_step(tensor)
        self.backwards += 1
        if tensor.numel() != 1:
            return
        scaled, told = self._scaled, self._told
        if told is not None:
            kept = told  # the loss before the framework divided it
            self._told = None
            self._pending_told += 1
        elif scaled is not None and scaled[0]() is tensor:
            kept = scaled[1]  # the loss before GradScaler multiplied it
        else:
            kept = tensor.detach()
        self._scaled = None
        pending = self._pending
        pending.append(kept)
        if len(pending) >= _MAX_PENDING:
            self._pending = [cast(torch.Tensor, sum(t.float() for t in pending))]  # on the device, no wait

    def _see_through_loss_scaling(self) -> None:
        """`scaler.scale(loss).backward()` (torch.amp, Accelerate and HF Trainer under fp16): remember
        the loss the scaled tensor came from."""
        try:
            from torch.amp.grad_scaler import GradScaler
        except ImportError:
            return
        original = GradScaler.scale
        counter = self

        def scale(scaler, outputs, *args, **kwargs):
            scaled = original(scaler, outputs, *args, **kwargs)
            if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor) and outputs.numel() == 1:
                try:
                    counter._scaled = (weakref.ref(scaled), outputs.detach())
                except TypeError:
                    pass
            return scaled

        scale.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
        GradScaler.scale = scale  # type: ignore[method-assign,assignment]  # patched; _restore puts it back
        self._restore.append((GradScaler, "scale", original))

    def _manual_step(self, loss: torch.Tensor) -> None:
        """Before a backward pass of a script without an optimizer: if the parameters of the previous one
        changed since, the script took a step (the listeners hear of it, and may stop the run here)."""
        updated = self._updated
        self._updated = ParameterUpdates.of(loss)
        if updated is not None and updated.changed():
            self._step_taken()
            for listener in self.listeners:
                listener(self, None)

    def _step_taken(self) -> None:
        self.steps += 1
        if self._pending:
            self._last_step, self._pending = self._pending, []
            self._last_told, self._pending_told = self._pending_told, 0

    def _after_step(self, optimizer, args, kwargs) -> None:
        done = self._counts[optimizer] = self._counts.get(optimizer, 0) + 1
        self._updated = None  # the update since the last backward pass was this step (not a manual one, at the end)
        if done == 1:  # made before install(), or not by Optimizer.__init__
            self._optimizers.add(optimizer)
        # A new training step: new gradients (a backward() since the last step), or this optimizer stepping
        # again (its backward() is not one the counter sees). Else it steps on the current gradients.
        if self._pending or id(optimizer) in self._in_step or not self.steps:
            self.steps += 1
            self._in_step = set()
        self._in_step.add(id(optimizer))
        if self._pending:  # a second optimizer stepping on the same backward keeps its loss
            self._last_step, self._pending = self._pending, []
            self._last_told, self._pending_told = self._pending_told, 0
        for listener in self.listeners:
            listener(self, optimizer)


def loss_value(snapshot: float | tuple[torch.Tensor, ...] | None) -> float | None:
    """The loss a `StepCounter.loss_snapshot()` kept (waits for the device that computed it)."""
    if snapshot is None or isinstance(snapshot, (int, float)):
        return snapshot
    try:
        return sum(float(_local(t).float()) for t in snapshot)
    except Exception:  # noqa: BLE001 - a device in an error state, an exotic tensor: no value
        return None


class StepLimit:
    """Stops the run (SmokeStepsReached) once every optimizer took `limit` steps: per optimizer, so
    that a loop stepping two optimizers stops after both finished the step."""

    def __init__(self, limit: int):
        self.limit = limit

    def attach(self, counter: StepCounter) -> StepLimit:
        counter.listeners.append(self._after_step)
        return self

    def _after_step(self, counter: StepCounter, optimizer) -> None:
        if counter.reached(self.limit):
            raise SmokeStepsReached(counter.steps)


class ParameterUpdates:
    """The parameters a backward pass reaches (the leaves of its graph) and a sample of their values, to
    tell whether the script updated them since (a manual step): a few evenly spread elements of each."""

    SAMPLE = 64

    def __init__(self, parameters: list[torch.Tensor]):
        self._parameters = parameters  # held until the next backward pass: a step seen after the script ended counts
        self._samples = [self._sample(p) for p in parameters]

    @classmethod
    def of(cls, loss: torch.Tensor) -> ParameterUpdates | None:
        leaves: list[torch.Tensor] = []
        seen: set[int] = set()
        stack = [loss.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)  # an AccumulateGrad node: its leaf
            if isinstance(variable, torch.Tensor):
                leaves.append(variable)
            else:
                stack.extend(child for child, _ in node.next_functions)
        return cls(leaves) if leaves else None

    @classmethod
    def _sample(cls, parameter: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            flat = _local(parameter).detach().reshape(-1)
            return flat[:: max(1, flat.numel() // cls.SAMPLE)].clone()

    def changed(self) -> bool:
        for parameter, before in zip(self._parameters, self._samples, strict=True):
            if not torch.equal(self._sample(parameter), before):
                return True
        return False


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's own shard: its full value would need a collective that the other ranks never join."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
