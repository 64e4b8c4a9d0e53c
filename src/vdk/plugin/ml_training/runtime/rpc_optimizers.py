"""`torch.distributed.optim.DistributedOptimizer` steps count as `torch.optim` steps do (issue 33, point 2).

A DistributedOptimizer is no `torch.optim.Optimizer`: its step asks every worker that owns parameters to step a
local optimizer there, over RPC (a TorchScript functional optimizer, `_FunctionalSGD` and the like, for the
optimizers torch has one of; else a `torch.optim` optimizer wrapped in `_LocalOptimizer`). So no torch.optim
step hook ever ran: a script that trained fully was told "no optimizer step was taken", and the smoke run never
cut it. Here the step of the DistributedOptimizer, on the rank that calls it (the one whose training loop it is),
runs torch.optim's global step hooks around it, with the DistributedOptimizer as the optimizer: it is counted,
followed by the agreed end and cut exactly as a torch.optim step (steps.py, smoke_stop.py, epochs.py).

The step the owners take for it is that same step, not another: a `_LocalOptimizer`'s torch.optim optimizer
steps without the global hooks (its own hooks still run), so that it is not counted twice and a rank's end is
never raised in one of RPC's threads. The loss of such a step is the one `dist_autograd.backward` was called on:
it is kept as `Tensor.backward`'s is. Standard library at import; torch when the script imports the modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vdk.plugin.ml_training.runtime import post_import

MODULE = "torch.distributed.optim.optimizer"
AUTOGRAD_MODULE = "torch.distributed.autograd"

_keep: Callable[[Any], None] | None = None  # the step counter's: keeps a loss backward() was called on


def install(keep: Callable[[Any], None]) -> None:
    """When the script imports DistributedOptimizer, its steps run torch.optim's step hooks; the losses
    `dist_autograd.backward` is called on go to `keep` (the last one given: this process's counter)."""
    global _keep
    first = _keep is None
    _keep = keep
    if first:
        post_import.when_imported(MODULE, _adapt)
        post_import.when_imported(AUTOGRAD_MODULE, _keep_losses)


def _keep_losses(module: Any) -> None:
    original = getattr(module, "backward", None)
    if original is None or getattr(original, "_vdk_keeps", False):
        return

    def backward(context_id: int, roots: Any, *args: Any, **kwargs: Any) -> Any:
        if _keep is not None:
            try:
                for root in roots:
                    _keep(root)
            except Exception:  # noqa: BLE001 - keeping the loss must never break training
                pass
        return original(context_id, roots, *args, **kwargs)

    backward._vdk_keeps = True  # type: ignore[attr-defined]  # attribute of a function object
    backward.__doc__ = original.__doc__
    module.backward = backward


def _adapt(module: Any) -> None:
    distributed = getattr(module, "DistributedOptimizer", None)
    local = getattr(module, "_LocalOptimizer", None)
    if distributed is None or getattr(distributed.step, "_vdk_hooked", False):
        return
    original_step = distributed.step

    def step(optimizer: Any, context_id: Any, *args: Any, **kwargs: Any) -> Any:
        from torch.optim import optimizer as torch_optimizer

        call_args, call_kwargs = (optimizer, context_id, *args), kwargs  # as torch.optim's: the optimizer first
        for pre_hook in list(torch_optimizer._global_optimizer_pre_hooks.values()):
            changed = pre_hook(optimizer, call_args, call_kwargs)
            if changed is not None:
                call_args, call_kwargs = changed
        result = original_step(*call_args, **call_kwargs)
        for post_hook in list(torch_optimizer._global_optimizer_post_hooks.values()):
            post_hook(optimizer, call_args, call_kwargs)
        return result

    step._vdk_hooked = True  # type: ignore[attr-defined]  # attribute of a function object
    step.__wrapped__ = original_step  # type: ignore[attr-defined]  # attribute of a function object
    step.__doc__ = original_step.__doc__
    distributed.step = step
    if local is not None:
        local.step = _local_step


def _local_step(local: Any, autograd_ctx_id: int) -> None:
    """`_LocalOptimizer.step` (torch's own, but for the global hooks): the owner's part of a DistributedOptimizer
    step, which the caller counts."""
    import torch.distributed.autograd as dist_autograd

    all_local_grads = dist_autograd.get_gradients(autograd_ctx_id)
    with type(local).global_lock:
        for param, grad in all_local_grads.items():
            param.grad = grad
        _step_without_global_hooks(local.optim)


def _step_without_global_hooks(optim: Any) -> None:
    unhooked = getattr(type(optim).step, "__wrapped__", None)  # torch.optim's step before its hooks' wrapper
    if unhooked is None:
        optim.step()
        return
    for pre_hook in list(getattr(optim, "_optimizer_step_pre_hooks", {}).values()):
        pre_hook(optim, (optim,), {})
    unhooked(optim)
    for post_hook in list(getattr(optim, "_optimizer_step_post_hooks", {}).values()):
        post_hook(optim, (optim,), {})
