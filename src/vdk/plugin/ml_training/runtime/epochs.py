"""Smoke runs that reach the end of an epoch: the code after the training loop runs once.

Every pass over a `torch.utils.data.DataLoader` (map-style or iterable) yields at most `smoke_steps`
batches and `len()` says so, so the first epoch ends after `smoke_steps` optimizer steps and what follows
the inner loop runs as on the cluster: evaluation (its loaders are cut the same way), checkpoint saves,
schedulers, logging. The run stops at the first optimizer step of the second epoch (before it is taken),
or when the script ends.

A pass that trains (backward() during it) but has not stepped yet goes on past `smoke_steps` batches
until its first step: gradient accumulation over more batches than that still steps once per epoch.
Loops that take no new batch from a DataLoader between steps stop after `smoke_steps` steps, as a plain
step limit would, and the result says why the end of an epoch was not reached. The Hugging Face Trainer
ends its training itself after `max_steps` (hf_shims.py), with one evaluation and one save.

Which pass a step belongs to is the pass the last batch was asked of; the order of events (passes
starting and ending, steps) is one counter.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached
from vdk.plugin.ml_training.runtime.steps import StepCounter

# Batches (per smoke step) a pass that trains may take before its first optimizer step: gradient
# accumulation over that many batches still steps; beyond it the pass ends.
ACCUMULATION_CEILING = 256

NO_DATALOADER = (
    "the training loop takes no batches from a torch DataLoader: the run stopped after smoke_steps optimizer steps"
)
NO_NEW_BATCHES = (
    "the training loop took no new batch from a DataLoader between optimizer steps: the run stopped after "
    "smoke_steps optimizer steps"
)
SCRIPT_ENDED = "the script ended before a pass over its training DataLoader did"
TURNED_OFF = "smoke_epoch_end = false in [ml-training]: the run stopped after smoke_steps optimizer steps"


class _Pass:
    """One pass (one `iter()`) over a DataLoader."""

    def __init__(self, start: int, counter: StepCounter):
        self.start = start
        self.end: int | None = None
        self.batches = 0
        self.steps = 0  # optimizer steps while it lasted
        self.backwards = 0  # backward() calls while it lasted
        self.trained = False
        self.exhausted = False  # it ended by running out of batches (or being cut), not by being dropped
        self.reported = False  # a framework reported the evaluation it served
        self._seen = (counter.steps, counter.backwards)

    @property
    def evaluated(self) -> bool:
        """A pass that served an evaluation: batches, and neither a step nor a backward() while it lasted."""
        return bool(self.batches) and not self.trained and not self.backwards

    def catch_up(self, counter: StepCounter) -> None:
        """Count the steps and backward() calls since it was last looked at, while it lasts."""
        if self.end is not None:
            return
        steps, backwards = self._seen
        self.steps += counter.steps - steps
        self.backwards += counter.backwards - backwards
        self._seen = (counter.steps, counter.backwards)
        self.trained = self.trained or self.steps > 0


class EpochWatch:
    """Cuts DataLoader passes, notices the end of the first epoch and what runs after it, and stops the
    run at the first optimizer step of the second epoch (or after `limit` steps when no DataLoader
    drives the loop)."""

    def __init__(self, counter: StepCounter, limit: int, adaptations: Any = None):
        self.counter = counter
        self.limit = limit
        self.adaptations = adaptations
        self._order = itertools.count()
        self._passes: list[_Pass] = []
        self._current: weakref.WeakKeyDictionary[Any, _Pass] = weakref.WeakKeyDictionary()  # loader -> pass
        self._last: _Pass | None = None  # the pass the last batch was asked of
        self._asked_since_step = False
        self.epoch_end: int | None = None  # when the first pass that trained ended
        self.saves = 0  # after the end of the epoch
        self.evaluations: list[int] = []  # batches of each evaluation a framework reported after it
        self.framework: str | None = None  # a framework that ends its training itself drives the loop
        self.framework_finished: str | None = None  # it did, after the smoke steps
        self.why_not: str | None = None
        self.cut = False  # a pass was cut short
        self._saving = 0

    # --- DataLoader passes ---------------------------------------------------------------------

    def started(self, loader: Any) -> _Pass:
        previous = self._current.get(loader)
        if previous is not None and previous.end is None:
            self._ended(previous)  # a new pass of the same loader: the old one is over
        new = _Pass(next(self._order), self.counter)
        self._passes.append(new)
        self._current[loader] = new
        return new

    def asked(self, p: _Pass) -> bool:
        """A batch is asked of `p`: whether the pass ends instead (it has yielded what a smoke run takes)."""
        p.catch_up(self.counter)
        self._last = p
        self._asked_since_step = True
        if p.batches < self.limit:
            return False
        if p.steps > 0 or p.backwards == 0 or p.batches >= self.limit * ACCUMULATION_CEILING:
            if not self.cut and self.adaptations is not None:
                self.adaptations.note(f"epochs cut to {self.limit} batch{'es' if self.limit != 1 else ''}")
            self.cut = True
            return True
        return False  # it trains, but has not stepped yet (gradient accumulation)

    def yielded(self, p: _Pass) -> None:
        p.batches += 1

    def exhausted(self, p: _Pass) -> None:
        if p.end is None:
            p.exhausted = True
            self._ended(p)

    def collected(self, p: _Pass) -> None:
        """Its iterator is gone: the loop that used it ended, or it was used for a batch or two."""
        if p.end is None:
            self._ended(p)

    def _ended(self, p: _Pass) -> None:
        p.catch_up(self.counter)
        p.end = next(self._order)
        if p.trained and self.epoch_end is None:
            self.epoch_end = p.end

    # --- optimizer steps -----------------------------------------------------------------------

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The first optimizer step of the second epoch is not taken: the run stops there."""
        last = self._last
        if self.framework is None and self.epoch_end is not None and last is not None and last.start > self.epoch_end:
            last.trained = True  # the second epoch's training pass
            from vdk.plugin.ml_training.runtime import smoke_resume

            if smoke_resume.preempt():  # the resume check's first start: SIGTERM, and this step goes on
                return
            raise SmokeStepsReached(self.counter.steps)

    def after_step(self, counter: StepCounter, optimizer: Any) -> None:
        """After an optimizer step; or, for a script without one (optimizer None), once its manual step was
        seen (before its next backward pass): a step of the second epoch's pass ends the run there."""
        last = self._last
        if optimizer is None:
            self.before_step(None, (), {})
        if last is not None and last.exhausted and not last.trained:
            # a step on the last batch of a pass that had run out already (a loop that asks one batch ahead)
            last.trained = True
            if self.epoch_end is None:
                self.epoch_end = last.end
        asked, self._asked_since_step = self._asked_since_step, False
        if self.framework is not None or not counter.reached(self.limit):
            return
        if not self._passes:
            self._stop(NO_DATALOADER)
        if not asked:
            self._stop(NO_NEW_BATCHES)
        if counter.steps >= self.limit * ACCUMULATION_CEILING:
            self._stop(f"{counter.steps} optimizer steps and no pass over a DataLoader ended")

    def _stop(self, why: str) -> None:
        if self.epoch_end is None:
            self.why_not = why
        raise SmokeStepsReached(self.counter.steps)

    # --- what ran after the end of the epoch ---------------------------------------------------

    def after_epoch(self) -> bool:
        return self.epoch_end is not None or self.framework_finished is not None

    def saved(self) -> None:
        if self.after_epoch() and not self._saving:
            self.saves += 1

    def saving(self) -> _Saving:
        """A save made of several files (a framework's checkpoint) counts once."""
        return _Saving(self)

    def evaluated(self) -> None:
        """A framework evaluated (after the smoke steps): over the batches of its last pass that did not train."""
        for p in self._passes:
            p.catch_up(self.counter)
        served = [p for p in self._passes if p.evaluated and not p.reported]
        if served:
            served[-1].reported = True
        self.evaluations.append(served[-1].batches if served else 0)

    def result(self, finished: bool) -> protocol.EpochEnd:
        if not self.after_epoch():
            why = self.why_not or (SCRIPT_ENDED if finished else "")
            return protocol.EpochEnd(False, why_not=why)
        evaluations = list(self.evaluations)
        if self.epoch_end is not None:
            for p in self._passes:
                p.catch_up(self.counter)
            after = [p for p in self._passes if p.start > self.epoch_end]
            evaluations += [p.batches for p in after if p.evaluated and not p.reported]
        then = []
        if evaluations:
            batches = sum(evaluations)
            times = f"{len(evaluations)} evaluations" if len(evaluations) > 1 else "evaluation"
            then.append(f"{times} ({batches} batch{'es' if batches != 1 else ''})" if batches else times)
        if self.saves:
            then.append(f"{self.saves} save{'s' if self.saves != 1 else ''}")
        return protocol.EpochEnd(True, how=self.framework_finished or "", then=tuple(then))


class _Saving:
    def __init__(self, watch: EpochWatch):
        self.watch = watch

    def __enter__(self) -> None:
        self.watch.saved()
        self.watch._saving += 1

    def __exit__(self, *exc: Any) -> None:
        self.watch._saving -= 1


class _CutPass:
    """The iterator of one DataLoader pass, ending where the smoke run's epoch ends."""

    def __init__(self, inner: Any, p: _Pass, watch: EpochWatch):
        self._inner = inner
        self._pass = p
        self._watch = watch
        weakref.finalize(self, watch.collected, p)

    def __iter__(self) -> _CutPass:
        return self

    def __next__(self) -> Any:
        watch, p = self._watch, self._pass
        if watch.asked(p):
            watch.exhausted(p)
            raise StopIteration
        try:
            batch = next(self._inner)
        except StopIteration:
            watch.exhausted(p)
            raise
        watch.yielded(p)
        return batch

    def __len__(self) -> int:
        return min(len(self._inner), self._watch.limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_active: EpochWatch | None = None  # this process's watch
_patched = False


def active() -> EpochWatch | None:
    """The watch of this process's smoke run, if its epochs are cut."""
    return _active


def watch(counter: StepCounter, limit: int, adaptations: Any) -> EpochWatch:
    """Cut every DataLoader pass at `limit` batches and stop the run at the start of the second epoch
    (`counter` counts the steps); returns the watch that says what happened. A process forked from one
    that watched already (an mp.spawn worker) gets a watch of its own."""
    global _active
    _active = EpochWatch(counter, limit, adaptations)
    counter.listeners.append(_active.after_step)
    _patch(adaptations)
    return _active


def _patch(adaptations: Any) -> None:
    """DataLoader, the optimizer-step hook and torch.save, once per process (`adaptations` can undo them)."""
    global _patched
    if _patched:
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    from torch.utils.data import DataLoader

    def iterate(original):
        def __iter__(loader):
            inner = original(loader)
            current = _active
            return inner if current is None else _CutPass(inner, current.started(loader), current)

        return __iter__

    def length(original):
        def __len__(loader):
            current = _active
            return original(loader) if current is None else min(original(loader), current.limit)

        return __len__

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _active is not None:
            _active.before_step(optimizer, args, kwargs)

    def counted(original):
        def save(*args, **kwargs):
            if _active is not None:
                _active.saved()
            return original(*args, **kwargs)

        return save

    adaptations.replace(DataLoader, "__iter__", iterate)
    adaptations.replace(DataLoader, "__len__", length)
    adaptations.replace(torch, "save", counted)
    register_optimizer_step_pre_hook(before_step)
    _patched = True
