"""Automatic resume and the checkpoint on the way out for Accelerate (runtime/resume.py says when).

Accelerate owns no loop: the script's `for epoch ...: for batch in train_dataloader:` is. So:
- Every `save_state` is listed in the lineage file, with where the training DataLoader stood (its pass and the
  batches of that pass already trained) and the optimizer steps taken.
- Resume, when the script does not call `load_state` itself: when the first pass over a prepared DataLoader starts
  (model, optimizer and scheduler are prepared by then), `load_state` of the last checkpoint of this run's lineage
  (model, optimizer, scheduler, RNG, registered objects); with `automatic_checkpoint_naming` the next save is
  numbered after the checkpoints there (Accelerate itself would start at 0 again and refuse the existing directory).
  Then the training DataLoader is fast-forwarded: the passes (epochs) already done yield no batch, so the code
  after the inner loop runs once for each with the restored model (an evaluation is repeated; the schedulers'
  `step()` and `save_state` there change nothing); the pass it stopped in skips the batches already trained
  (Accelerate's `skip_first_batches`: no data is loaded for them).
- The stop: told to stop (SIGTERM), the ranks agree at the next batch asked of a prepared DataLoader once the
  step is whole (no gradient accumulation half done), `save_state` writes the checkpoint there (the project's
  `checkpoints/checkpoint_N` with automatic naming, else `checkpoints/on-stop-step-N` of the project directory or
  the working directory), and the rank ends with 143.

Applied when the user's code imports `accelerate.accelerator`.
"""

from __future__ import annotations

import functools
import os
import re
import weakref
from typing import Any

from vdk.plugin.ml_training.runtime import lineage as lineages
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import resume


class _Run:
    """This process's Accelerate run: its accelerators, where the training DataLoader stands, the fast-forward."""

    def __init__(self) -> None:
        self.accelerators: weakref.WeakSet[Any] = weakref.WeakSet()
        self.started = False  # the first pass of a prepared DataLoader began
        self.skip: dict[str, int] | None = None  # {"loader", "pass", "batches"} of the checkpoint resumed from
        self.replaying = False  # passes already done go by, empty
        self.training: Any = None  # weakref to the loader whose batch the last optimizer step trained on
        self.last_yielder: Any = None  # weakref to the loader that yielded the last batch
        self.since_step = 0  # batches the training loader yielded since the last optimizer step


_run = _Run()


def patch(module: Any) -> None:
    accelerator = getattr(module, "Accelerator", None)
    if accelerator is None or getattr(accelerator.save_state, "_vdk_resume", False):
        return
    from accelerate import data_loader
    from accelerate import scheduler
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def make_init(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if not _made_by_a_framework():
                _run.accelerators.add(self)

        return __init__

    def make_save(original):
        @functools.wraps(original)
        def save_state(self, output_dir=None, *args, **kwargs):
            if self not in _run.accelerators:
                return original(self, output_dir, *args, **kwargs)  # a framework's (the Trainer's checkpoints)
            if _run.replaying:
                return None  # the state was restored from this very checkpoint: nothing changed since
            from vdk.plugin.ml_training.runtime import epochs

            watch = epochs.active()
            if watch is None:
                location = original(self, output_dir, *args, **kwargs)
            else:
                with watch.saving():  # a smoke run counts one save, whatever number of files it writes
                    location = original(self, output_dir, *args, **kwargs)
            where = str(location or output_dir or "")
            if where:
                resume.saved(os.path.abspath(where), lineages.ACCELERATE, resume.steps(), resume.stopping(),
                             _position(self))  # fmt: skip
            return location

        save_state._vdk_resume = True  # type: ignore[attr-defined]  # attribute of a function object
        return save_state

    def make_load(original):
        @functools.wraps(original)
        def load_state(self, *args, **kwargs):
            self._vdk_loaded = True  # the script resumes by itself
            return original(self, *args, **kwargs)

        return load_state

    def make_iter(original):
        @functools.wraps(original)
        def __iter__(loader):
            if getattr(loader, "_vdk_inner", False):
                return original(loader)
            return _passes(loader, original)

        return __iter__

    def make_step(original):
        @functools.wraps(original)
        def step(self, *args, **kwargs):
            if _run.replaying:
                return None  # an epoch's scheduler step of an epoch already done
            return original(self, *args, **kwargs)

        return step

    accelerator.__init__ = make_init(accelerator.__init__)
    accelerator.save_state = make_save(accelerator.save_state)
    accelerator.load_state = make_load(accelerator.load_state)
    for name in ("DataLoaderShard", "DataLoaderDispatcher"):
        cls = getattr(data_loader, name, None)
        if cls is not None:
            cls.__iter__ = make_iter(cls.__iter__)
    scheduler.AcceleratedScheduler.step = make_step(scheduler.AcceleratedScheduler.step)
    register_optimizer_step_post_hook(_after_step)


def _made_by_a_framework() -> bool:
    """Whether the Accelerator being made is a framework's own (the Hugging Face Trainer's, which hf_resume.py
    resumes and stops): only the script's own loop is this module's."""
    import sys
    from types import FrameType

    frame: FrameType | None = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return False
        if str(frame.f_globals.get("__name__", "")).startswith(("transformers.", "trl.")):
            return True
        frame = frame.f_back
    return False


def _after_step(*_: Any) -> None:
    _run.training = _run.last_yielder
    _run.since_step = 0


def _owner(loader: Any) -> Any:
    for accelerator in list(_run.accelerators):
        if any(d is loader for d in getattr(accelerator, "_dataloaders", [])):
            return accelerator
    return None


def _index(accelerator: Any, loader: Any) -> int:
    for i, d in enumerate(getattr(accelerator, "_dataloaders", [])):
        if d is loader:
            return i
    return -1


def _passes(loader: Any, original: Any):
    """One pass over a prepared DataLoader: resumed, fast-forwarded, watched for the stop."""
    accelerator = _owner(loader)
    if accelerator is None:  # a framework's loader (the Trainer's), or one no Accelerator of the script prepared
        yield from original(loader)
        return
    if not _run.started:
        _run.started = True
        resume.keep_training()  # from here on, SIGTERM waits for the end of a step
        _resume(accelerator)
    index = _index(accelerator, loader)
    this_pass = getattr(loader, "_vdk_started", 0)
    loader._vdk_started, loader._vdk_current = this_pass + 1, this_pass
    loader._vdk_batches, loader._vdk_ended = 0, False
    skip = _run.skip if _run.skip is not None and _run.skip.get("loader") == index else None
    if skip is not None and this_pass < skip["pass"]:
        _run.replaying = True  # an epoch already done: no batch, its end runs with the restored state
        if hasattr(loader, "iteration"):
            loader.iteration += 1
        batches: Any = iter(())
    elif skip is not None:
        _run.replaying, _run.skip = False, None
        batches = _skipping(loader, skip["batches"], original)
        loader._vdk_batches = skip["batches"]
    else:
        batches = original(loader)
    for batch in batches:
        _stop_here(accelerator)
        loader._vdk_batches += 1
        _run.last_yielder = weakref.ref(loader)
        if _run.training is not None and _run.training() is loader:
            _run.since_step += 1
        yield batch
    loader._vdk_ended = True
    _stop_here(accelerator)


def _skipping(loader: Any, batches: int, original: Any):
    """The pass that was cut: its first `batches` batches skipped by the sampler (no data loaded for them)."""
    if batches <= 0:
        yield from original(loader)
        return
    from accelerate.data_loader import skip_first_batches

    skipped = skip_first_batches(loader, batches)
    skipped._vdk_inner = True
    yield from skipped
    if hasattr(loader, "iteration"):
        loader.iteration += 1  # the skipping loader counted its own pass


def _resume(accelerator: Any) -> None:
    if getattr(accelerator, "_vdk_loaded", False):
        return
    lineage = resume.lineage()
    checkpoint = lineage.last(lineages.ACCELERATE) if lineage is not None else None
    if checkpoint is None:
        return
    if os.environ.get(protocol.MODE) == protocol.SMOKE:  # safetensors' loading onto a GPU pins host memory
        accelerator.load_state(checkpoint.path, map_location="cpu")
    else:
        accelerator.load_state(checkpoint.path)
    configuration = accelerator.project_configuration
    if configuration.automatic_checkpoint_naming and accelerator.project_dir:
        configuration.iteration = _next_iteration(os.path.join(accelerator.project_dir, "checkpoints"))
    position = checkpoint.position or {}
    if isinstance(position.get("loader"), int) and position["loader"] >= 0:
        _run.skip = {k: int(position.get(k) or 0) for k in ("loader", "pass", "batches")}
    resume.resumed(checkpoint.name, checkpoint.step, None, lineages.ACCELERATE)


def _next_iteration(directory: str) -> int:
    numbers = []
    try:
        for name in os.listdir(directory):
            match = re.search(r"(\d+)$", name)
            if match:
                numbers.append(int(match.group(1)))
    except OSError:
        pass
    return max(numbers) + 1 if numbers else 0


def _position(accelerator: Any) -> dict[str, int]:
    """Where the training DataLoader stands: the pass under way (or the next, when it ended) and its batches
    already trained."""
    loader = _run.training() if _run.training is not None else None
    if loader is None:
        return {}
    index = _index(accelerator, loader)
    if index < 0:
        return {}
    current = int(getattr(loader, "_vdk_current", 0))
    if getattr(loader, "_vdk_ended", False):
        return {"loader": index, "pass": current + 1, "batches": 0}
    return {"loader": index, "pass": current, "batches": int(getattr(loader, "_vdk_batches", 0))}


def _stop_here(accelerator: Any) -> None:
    """Before a batch is handed out (and at the end of a pass): the checkpoint on the way out, once the ranks agree
    and the last step is whole."""
    if accelerator is None or _run.since_step or _run.replaying:
        return
    if not resume.agreed():
        return
    if accelerator.project_configuration.automatic_checkpoint_naming:
        location = accelerator.save_state()
    else:
        root = accelerator.project_dir or os.getcwd()
        location = accelerator.save_state(os.path.join(root, "checkpoints", f"on-stop-step-{resume.steps()}"))
    raise resume.StoppedToResume(os.path.basename(str(location or "")))
