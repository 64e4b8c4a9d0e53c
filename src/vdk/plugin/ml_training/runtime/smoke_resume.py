"""The smoke run's resume check, in its ranks; the launcher's side (ops/resume_check.py) reads what is written here
(`read_first`, `read_second`): one wire format, one module.

The first start (SMOKE_RESUME=stop) runs as every smoke run does, but its planned end is a stop as a preemption
makes it (`preempt`): SIGTERM, when the process handles it (a framework of runtime/resume.py, Lightning, the script's
own handler), and the step under way goes on so that the handler can act at its end; a process that does not
handle SIGTERM would just end, so it stops there. Meanwhile rank 0 keeps a fingerprint of the parameters each of
its optimizers steps, before its first step and after every step (a few sampled values of each: cheap, and a
smoke run takes a handful of steps): `RUN_DIR/resume-first.json`.

The second start (SMOKE_RESUME=resume), in the same working directory, tells from its first optimizer step where it
began: the parameters it is about to step are those after step N of the first start (resumed there), or those it
began with (started over); an optimizer state restored at step N, a framework that said it resumed, a
DistributedSampler set to an epoch past 0 say so too. Rank 0 writes `RUN_DIR/resume-second.json`.
Standard library at import; torch when installed (a smoke rank has imported it by then).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.runtime import protocol

FIRST = "resume-first.json"
SECOND = "resume-second.json"
SAMPLE = 64  # values of each parameter in its fingerprint


class _Check:
    def __init__(self, phase: str, run_dir: str, rank: int | str):
        self.phase = phase
        self.run_dir = run_dir
        self.main = str(rank) == "0"
        self.preempted = False
        self.optimizers: list[Any] = []  # in the order of their first step
        self.record: dict[str, Any] = {}


_check: _Check | None = None


def install(rank: int | str) -> None:
    """In a smoke rank of a run with the resume check (SMOKE_RESUME set): its hooks, once per process."""
    global _check
    phase = os.environ.get(protocol.SMOKE_RESUME)
    run_dir = os.environ.get(protocol.RUN_DIR)
    if phase not in (protocol.SMOKE_STOP, protocol.SMOKE_RESTART) or not run_dir:
        return
    fresh = _check is None
    _check = _Check(phase, run_dir, rank)
    if not fresh:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_before_step)
    register_optimizer_step_post_hook(_after_step)
    _watch_sampler_epochs()


def first_start() -> bool:
    """Whether this is the resume check's first start, whose planned end is a stop (not the end of training)."""
    return _check is not None and _check.phase == protocol.SMOKE_STOP


def preempt() -> bool:
    """The first start's planned end, once: True when SIGTERM went to this process's handler (the step under way goes
    on, for the handler to act at its end); False when SIGTERM would have ended it: the caller stops the rank now."""
    check = _check
    if check is None or check.phase != protocol.SMOKE_STOP or check.preempted:
        return False
    check.preempted = True
    handler = signal.getsignal(signal.SIGTERM)
    if handler in (signal.SIG_DFL, signal.SIG_IGN, None):
        return False
    signal.raise_signal(signal.SIGTERM)
    return True


def saved_on_stop(checkpoint: str, step: int) -> None:
    """A framework wrote its checkpoint on the way out (runtime/resume.py), in the first start."""
    if _check is not None and _check.main and _check.phase == protocol.SMOKE_STOP:
        _check.record["on_stop"] = {"checkpoint": checkpoint, "step": int(step)}
        _write(_check, FIRST)


def framework_resumed(framework: str, checkpoint: str, step: int) -> None:
    """A framework resumed (runtime/resume.py), in the second start."""
    if _check is not None and _check.main and _check.phase == protocol.SMOKE_RESTART:
        _check.record["framework"] = {"framework": framework, "checkpoint": checkpoint, "step": int(step)}
        _write(_check, SECOND)


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    try:
        _record_before(optimizer)
    except Exception:  # noqa: BLE001 - the check must never break a step: it then only knows less
        pass


def _after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    try:
        _record_after(optimizer)
    except Exception:  # noqa: BLE001 - as before the step
        pass


def _record_before(optimizer: Any) -> None:
    check = _check
    if check is None or not check.main:
        return
    index = _index(check, optimizer)
    if check.phase == protocol.SMOKE_STOP:
        prints = check.record.setdefault("fingerprints", {}).setdefault(str(index), [])
        if not prints:
            prints.append(fingerprint(optimizer))  # what it began with: step 0
            _write(check, FIRST)
    elif index == 0 and "first_step" not in check.record:
        first = {"fingerprint": fingerprint(optimizer), "optimizer_step": _optimizer_step(optimizer)}
        check.record["first_step"] = first
        _write(check, SECOND)


def _record_after(optimizer: Any) -> None:
    check = _check
    if check is None or not check.main or check.phase != protocol.SMOKE_STOP:
        return
    prints = check.record.setdefault("fingerprints", {}).setdefault(str(_index(check, optimizer)), [])
    prints.append(fingerprint(optimizer))
    _write(check, FIRST)


def _index(check: _Check, optimizer: Any) -> int:
    for i, known in enumerate(check.optimizers):
        if known is optimizer:
            return i
    check.optimizers.append(optimizer)
    return len(check.optimizers) - 1


def fingerprint(optimizer: Any) -> str:
    """A digest of a few evenly spread values of every parameter the optimizer steps (a DTensor's own shard)."""
    import torch

    digest = hashlib.sha1()
    with torch.no_grad():
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                to_local = getattr(parameter, "to_local", None)
                local = to_local() if callable(to_local) else parameter
                flat = local.detach().reshape(-1)
                sample = flat[:: max(1, flat.numel() // SAMPLE)].float().cpu()
                digest.update(str(tuple(local.shape)).encode())
                digest.update(repr(sample.tolist()).encode())  # no numpy: an image may have torch alone
    return digest.hexdigest()


def _optimizer_step(optimizer: Any) -> int | None:
    """The step count an optimizer keeps in its state (Adam's and most others'): > 0 once a state was restored."""
    steps = []
    for state in getattr(optimizer, "state", {}).values():
        step = state.get("step") if isinstance(state, dict) else None
        try:
            if step is not None:
                steps.append(int(float(step)))
        except (TypeError, ValueError, RuntimeError):
            continue
    return max(steps) if steps else None


def _watch_sampler_epochs() -> None:
    """The first epoch a DistributedSampler is set to in the second start (a loop that resumed at epoch N sets N)."""
    from torch.utils.data.distributed import DistributedSampler

    original = DistributedSampler.set_epoch

    def set_epoch(sampler: Any, epoch: int) -> None:
        check = _check
        if check is not None and check.main and check.phase == protocol.SMOKE_RESTART and "epoch" not in check.record:
            check.record["epoch"] = int(epoch)
            _write(check, SECOND)
        return original(sampler, epoch)

    DistributedSampler.set_epoch = set_epoch  # type: ignore[assignment]  # a wrapper of the method, in its place


def _write(check: _Check, name: str) -> None:
    try:
        protocol.write_json_atomically(Path(check.run_dir) / name, check.record)
    except (OSError, TypeError, ValueError):
        pass


# --- the launcher's side -----------------------------------------------------------------------------------------


def read_first(run_dir: Path | str) -> dict[str, Any]:
    """What rank 0 of the first start recorded: {"fingerprints": {optimizer: [step 0, step 1, ...]}, "on_stop"}."""
    return _read(Path(run_dir) / FIRST)


def read_second(run_dir: Path | str) -> dict[str, Any]:
    """What rank 0 of the second start recorded: {"first_step": {...}, "framework": {...}, "epoch": N}."""
    return _read(Path(run_dir) / SECOND)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
