"""Smoke runs that reach the end of an epoch, then the end of training: the code after the epoch's inner loop runs
once, and then the code after the training loop.

Every pass over a `torch.utils.data.DataLoader` (map-style or iterable) yields at most `smoke_steps` batches and
`len()` says so, so the first epoch ends after `smoke_steps` optimizer steps and what follows the inner loop runs as
on the cluster: evaluation (its loaders are cut the same way), checkpoint saves, schedulers, logging. At the first
optimizer step of the second epoch (before it is taken) the script leaves its training loop, as if the last epoch
had just ended (training_loops.py): the code after the loop runs for real (final saves, test evaluation, export).
The training loop is the innermost run of a loop of the job's code that the first training step was in and the
second epoch's first step is in too. Should a step come again after that (training again: the loop left was an
inner one), the next such loop is left; when no loop of the job's code holds both steps (the loop is a library's),
the run stops there instead, and the result says what did not run.

A pass that trains (backward() during it) but has not stepped yet goes on past `smoke_steps` batches until its
first step: gradient accumulation over more batches than that still steps once per epoch. Loops that take no new
batch from a DataLoader between steps end their epoch after `smoke_steps` steps, right after the last: the loop
that step is in is left (and, should the script begin a backward pass again, the next one). A framework that ends
its training itself (the Hugging Face Trainer after `max_steps`: hf_shims.py; Lightning after the first epoch:
lightning_shims.py) says so, and what the script does after its training call is after training. A sweep's trial
that has not reported its metric yet goes on (`hold`).

What ran after the end of the epoch and after training is counted by after_training.py. Which pass a step belongs
to is the pass the last batch was asked of; the order of events (passes starting and ending, steps) is one counter.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import training_loops
from vdk.plugin.ml_training.runtime.after_training import Phase
from vdk.plugin.ml_training.runtime.steps import LeaveLoop
from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached
from vdk.plugin.ml_training.runtime.steps import StepCounter

# Batches (per smoke step) a pass that trains may take before its first optimizer step: gradient
# accumulation over that many batches still steps; beyond it the pass ends.
ACCUMULATION_CEILING = 256

NO_DATALOADER = "the training loop takes no batches from a torch DataLoader: its epoch ended after smoke_steps steps"
NO_NEW_BATCHES = (
    "the training loop took no new batch from a DataLoader between optimizer steps: its epoch ended after "
    "smoke_steps steps"
)
SCRIPT_ENDED = "the script ended before a pass over its training DataLoader did"
TURNED_OFF = "smoke_epoch_end = false in [ml-training]: the run stopped after smoke_steps optimizer steps"
# What covers the code after a training loop the smoke run could not leave.
COVER = "smoke_args that make the script train a single epoch (e.g. `--epochs 1`) let the smoke run reach it"


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
        self.eval_forward = False  # a module ran forward in eval mode, or without gradients, while it lasted
        self.after_training = False  # it started after training ended
        self._seen = (counter.steps, counter.backwards)

    @property
    def evaluated(self) -> bool:
        """A pass that served an evaluation: batches, a forward pass in eval mode (or without gradients), and
        neither a step nor a backward() while it lasted."""
        return bool(self.batches) and self.eval_forward and not self.trained and not self.backwards

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
    """Cuts DataLoader passes, notices the end of the first epoch and what runs after it, and at the first optimizer
    step of the second epoch (or the first after `limit` steps when no DataLoader drives the loop) leaves the
    training loop, or stops the run when it cannot."""

    def __init__(self, counter: StepCounter, limit: int, adaptations: Any = None):
        self.counter = counter
        self.limit = limit
        self.adaptations = adaptations
        self.hold: Callable[[], str | None] | None = None  # why to go on training for now (a sweep's metric)
        self.announce: Callable[[int], None] | None = None  # tells the other ranks this one ended (smoke_stop.py)
        self._order = itertools.count()
        self._passes: list[_Pass] = []
        self._current: weakref.WeakKeyDictionary[Any, _Pass] = weakref.WeakKeyDictionary()  # loader -> pass
        self._last: _Pass | None = None  # the pass the last batch was asked of
        self._asked_since_step = False
        self.epoch_end: int | None = None  # when the first pass that trained ended
        self.framework: str | None = None  # a framework that ends its training itself drives the loop
        self.framework_finished: str | None = None  # it did, after the smoke steps
        self.why_not: str | None = None
        self.cut = False  # a pass was cut short
        self.epoch = Phase()  # what ran after the end of the epoch
        self.after = Phase()  # what ran after training
        self.trained_on: int | None = None  # steps when training ended
        self.how: str = ""  # how training ended ("left the training loop at train.py:42 ...")
        self.not_run: str = ""  # why the code after the training loop did not run
        self.held = 0  # steps taken past the end while `hold` said why
        self.held_for = ""  # and what it said
        self._training_sites: list[training_loops.Site] = []  # the loops the last step of the first epoch was in
        self._by_steps = False  # the epoch ends by the step count (no DataLoader drives the loop)
        self._left: tuple[int, int | None] | None = None  # the run of a loop a LeaveLoop was raised for
        self._hooked = False

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
            self._epoch_ended(p.end)

    def _epoch_ended(self, when: int) -> None:
        self.epoch_end = when
        self._watch_forward_passes()

    def forward(self, module: Any) -> None:
        """A module runs forward: in eval mode or without gradients, it serves an evaluation."""
        p = self._last
        if p is not None and p.end is None and not p.eval_forward:
            if not getattr(module, "training", True) or not torch.is_grad_enabled():
                p.eval_forward = True

    def _watch_forward_passes(self) -> None:
        """After the end of the epoch, what a pass serves matters: forward passes are watched from then on."""
        if self._hooked:
            return
        self._hooked = True
        from torch.nn.modules.module import register_module_forward_pre_hook

        def seen(module: Any, args: Any) -> None:
            if _active is not None:
                _active.forward(module)

        register_module_forward_pre_hook(seen)

    # --- optimizer steps -----------------------------------------------------------------------

    def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before an optimizer step (for a script without one: once its manual step was seen): where more training
        would begin, training ends instead (`end_training`)."""
        if self.framework is not None:
            return
        if self.epoch_end is None and self.trained_on is None and training_loops.marked():
            self._training_sites = training_loops.enclosing(sys._getframe(1))
        last = self._last
        second_epoch = self.epoch_end is not None and last is not None and last.start > self.epoch_end
        if second_epoch and last is not None:
            last.trained = True  # the second epoch's training pass
            from vdk.plugin.ml_training.runtime import smoke_resume

            if smoke_resume.preempt():  # the resume check's first start: SIGTERM, and this step goes on
                return
        if second_epoch or self._by_steps or self.trained_on is not None:
            self.end_training()

    def end_training(self, follow: bool = False) -> None:
        """Leave the innermost run of a loop of the job's code that the first training step was in, and this one too
        (LeaveLoop); or stop the run here when there is none (SmokeStepsReached), as in the resume check's first
        start, whose end is a preemption's stop (smoke_resume.py; the second start ends training). A sweep's trial
        that has not reported its metric goes on (`hold`), unless another rank ended already (`follow`). The other
        ranks end theirs at their next step (smoke_stop.py)."""
        why = self.hold() if self.hold is not None and not follow else None
        if why:
            self.held += 1
            self.held_for = why
            return
        steps = self.counter.steps
        from vdk.plugin.ml_training.runtime import smoke_resume

        if smoke_resume.first_start():  # the resume check's first start ends as a preemption: a stop, here
            if self.announce is not None:
                self.announce(steps)
            raise SmokeStepsReached(steps)
        if self.trained_on is not None:  # training again after the loop that was left: it was an inner one
            self.epoch.take(self.after)
        first = {site.key for site in self._training_sites}
        here = training_loops.enclosing(sys._getframe(1)) if training_loops.marked() else []
        common = [site for site in here if site.key in first and site.key != self._left]
        if self.announce is not None:
            self.announce(steps)
        if not common:
            self._stop(steps, here)
        site = common[0]
        where = site.loop.where()
        left_again = self.trained_on is not None
        self.trained_on = steps
        self._left = site.key
        if self.epoch_end is None:  # the epoch ended by the step count: the loop that was left was it
            self._epoch_ended(next(self._order))
        self.how = f"the script left its training loop ({where}) {self._when(left_again)}"
        raise LeaveLoop(steps, site.frame, site.loop.id, where)

    def _when(self, again: bool) -> str:
        if again:
            return "when it began training again"
        return "after its first epoch" if not self._by_steps else "after smoke_steps steps"

    def _stop(self, steps: int, here: list[training_loops.Site]) -> None:
        caller = training_loops.where(training_loops.job_frame(sys._getframe(2)))
        if self.trained_on is not None:
            self.not_run = (
                f"the script began training again at {caller or 'a step'} after leaving its training loop, and "
                "no loop of the job's code holds both; the run stopped there"
            )
        elif not training_loops.marked():
            self.not_run = "the job's loops are not known in this process: the run stopped at the end of the epoch"
        else:
            at = f" ({caller})" if caller else ""
            self.not_run = (
                f"the training loop is not in the job's own code{at}: the run stopped at the end of the epoch, "
                "before the code after it"
            )
        self.trained_on = self.trained_on if self.trained_on is not None else steps
        raise SmokeStepsReached(steps)

    def after_step(self, counter: StepCounter, optimizer: Any) -> None:
        """After an optimizer step; or, for a script without one (optimizer None), once its manual step was
        seen (before its next backward pass): a step of the second epoch's pass ends training there."""
        last = self._last
        if optimizer is None:
            self.before_step(None, (), {})
        if last is not None and last.exhausted and not last.trained:
            # a step on the last batch of a pass that had run out already (a loop that asks one batch ahead)
            last.trained = True
            if self.epoch_end is None:
                self._epoch_ended(last.end if last.end is not None else next(self._order))
        asked, self._asked_since_step = self._asked_since_step, False
        if self.framework is not None or self.epoch_end is not None or not counter.reached(self.limit):
            return
        if not self._passes:
            self._by_steps, self.why_not = True, self.why_not or NO_DATALOADER
        elif not asked:
            self._by_steps, self.why_not = True, self.why_not or NO_NEW_BATCHES
        elif counter.steps >= self.limit * ACCUMULATION_CEILING:
            self._by_steps = True
            self.why_not = self.why_not or f"{counter.steps} optimizer steps and no pass over a DataLoader ended"
        if self._by_steps:
            self.end_training()  # right after the step: nothing of a next one runs (its forward, its prints)

    def before_backward(self, counter: StepCounter) -> None:
        """A loop whose epoch ended by the step count (or without an optimizer, whose update cannot be held back as
        an optimizer's step is) that begins a backward pass after it left its training loop trains again: the next
        loop is left there."""
        if self.framework is None and self._left is not None and (counter.manual or self._by_steps):
            self.end_training()

    # --- what ran after the end of the epoch, and after training --------------------------------

    def after_epoch(self) -> bool:
        return self.epoch_end is not None or self.framework_finished is not None

    def phase(self) -> Phase | None:
        """Where what runs now is counted: after training, after the end of the epoch, or nowhere (before it)."""
        if self.trained_on is not None:
            return self.after
        return self.epoch if self.after_epoch() else None

    def saved(self) -> None:
        phase = self.phase()
        if phase is not None:
            phase.saved()

    def saving(self) -> Any:
        """A save made of several files (a framework's checkpoint) counts once, when it returned."""
        return (self.phase() or Phase()).saving()

    def pushing(self) -> Any:
        """A push to the Hub, checked up to its network call: counted once it got there."""
        return (self.phase() or Phase()).pushing()

    def training_ended(self, how: str) -> None:
        """A framework that drives the loop returned from its training call: what follows is after training."""
        if self.trained_on is None:
            self.trained_on = self.counter.steps
            self.how = how

    def evaluated(self, kind: str = "evaluation") -> None:
        """A framework evaluated (`kind`: validation, test, prediction): over the batches of its last pass."""
        for p in self._passes:
            p.catch_up(self.counter)
        served = [p for p in self._passes if p.batches and not p.trained and not p.backwards and not p.reported]
        if served:
            served[-1].reported = True
        phase = self.phase()
        if phase is not None:
            phase.evaluated(kind, served[-1].batches if served else 0)

    def result(self, finished: bool) -> protocol.EpochEnd:
        if not self.after_epoch():
            why = self.why_not or (SCRIPT_ENDED if finished else "")
            return protocol.EpochEnd(False, why_not=why)
        self._count_passes()
        how = self.framework_finished or ""
        if self._by_steps and self.trained_on is not None:
            how = self.why_not or ""
        return protocol.EpochEnd(True, how=how, then=self.epoch.items())

    def training_end(self, finished: bool) -> protocol.TrainingEnd:
        """Whether the code after the training loop ran (`finished`: the script ended by itself)."""
        self._count_passes()
        held = f"{self.held} step{'s' if self.held != 1 else ''} past smoke_steps: {self.held_for}" if self.held else ""
        if self.not_run:
            return protocol.TrainingEnd(False, not_run=f"{self.not_run}; {COVER}", note=held)
        if self.trained_on is not None:
            return protocol.TrainingEnd(True, how=self.how, then=self.after.items(), note=held)
        if finished and self.after_epoch():
            return protocol.TrainingEnd(True, how="the script's training loop ended by itself", note=held)
        return protocol.TrainingEnd(False, note=held)

    def _count_passes(self) -> None:
        """The evaluations passes served after the end of the epoch, and after training, that no framework told."""
        for p in self._passes:
            p.catch_up(self.counter)
            if p.evaluated and not p.reported and self.epoch_end is not None and p.start > self.epoch_end:
                p.reported = True
                (self.after if p.after_training else self.epoch).evaluated("evaluation", p.batches)


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
    """Cut every DataLoader pass at `limit` batches and end training at the start of the second epoch (`counter`
    counts the steps); returns the watch that says what happened. A process forked from one that watched already
    (an mp.spawn worker) gets a watch of its own."""
    global _active
    _active = EpochWatch(counter, limit, adaptations)
    counter.listeners.append(_active.after_step)
    counter.backward_listeners.append(_active.before_backward)
    _patch(adaptations)
    return _active


def _patch(adaptations: Any) -> None:
    """DataLoader, the optimizer-step hook and the savers, once per process (`adaptations` can undo them)."""
    global _patched
    if _patched:
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    from torch.utils.data import DataLoader

    from vdk.plugin.ml_training.runtime import after_training

    def iterate(original):
        def __iter__(loader):
            inner = original(loader)
            current = _active
            if current is None:
                return inner
            p = current.started(loader)
            p.after_training = current.trained_on is not None
            return _CutPass(inner, p, current)

        return __iter__

    def length(original):
        def __len__(loader):
            current = _active
            return original(loader) if current is None else min(original(loader), current.limit)

        return __len__

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _active is not None:
            _active.before_step(optimizer, args, kwargs)

    adaptations.replace(DataLoader, "__iter__", iterate)
    adaptations.replace(DataLoader, "__len__", length)
    after_training.count_saves(adaptations, active)
    after_training.stand_in_pushes(adaptations, active)
    register_optimizer_step_pre_hook(before_step)
    _patched = True
