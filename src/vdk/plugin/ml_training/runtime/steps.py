"""Counting optimizer steps and stopping a smoke run after `limit` of them, whatever drives the loop
(a plain loop, DDP, HF Trainer, Accelerate): torch calls global optimizer-step hooks for every
`torch.optim.Optimizer` subclass."""
from __future__ import annotations

import math
import weakref

import torch


class SmokeStepsReached(SystemExit):
    """Raised right after the last smoke step. A SystemExit, so `except Exception` in user code or
    libraries does not swallow it; the bootstrap catches it."""

    def __init__(self, steps: int):
        super().__init__(0)
        self.steps = steps


class StepLimit:
    """Counts optimizer steps per optimizer and stops once every optimizer took `limit` steps.

    Per optimizer, so that a loop stepping two optimizers (a GAN's generator and discriminator)
    stops after both finished the step; a wrapper whose step calls an inner optimizer's step stops
    after the outer call, since both are known optimizers.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.last_loss: float | None = None
        self.steps = 0  # optimizer steps done: those of the optimizer that stepped most
        self._steps: "weakref.WeakKeyDictionary[torch.optim.Optimizer, int]" = weakref.WeakKeyDictionary()
        self._optimizers: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._handles: list = []
        self._restore: list = []

    def install(self) -> "StepLimit":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles = [register_optimizer_step_post_hook(self._after_step)]
        self._track_new_optimizers()
        self._record_losses()
        return self

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._handles, self._restore = [], []

    def _track_new_optimizers(self) -> None:
        original = torch.optim.Optimizer.__init__
        optimizers = self._optimizers

        def __init__(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            optimizers.add(optimizer)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]
        self._restore.append((torch.optim.Optimizer, "__init__", original))

    def _record_losses(self) -> None:
        """The value of the last scalar that `.backward()` was called on: the loss, in practice."""
        original = torch.Tensor.backward
        limit = self

        def backward(tensor, *args, **kwargs):
            if tensor.numel() == 1:
                try:
                    limit.last_loss = float(tensor.detach().float())
                except (RuntimeError, TypeError, ValueError):
                    pass
            return original(tensor, *args, **kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        torch.Tensor.backward = backward  # type: ignore[method-assign]
        self._restore.append((torch.Tensor, "backward", original))

    def _after_step(self, optimizer, args, kwargs) -> None:
        done = self._steps[optimizer] = self._steps.get(optimizer, 0) + 1
        self.steps = max(self.steps, done)
        self._optimizers.add(optimizer)
        if all(self._steps.get(o, 0) >= self.limit for o in list(self._optimizers)):
            raise SmokeStepsReached(self.steps)


def finite_or_none(value: float | None) -> float | str | None:
    """JSON has no NaN: non-finite losses travel as text."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
