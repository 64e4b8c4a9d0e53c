"""Automatic resume and the checkpoint on the way out for a Hugging Face `Trainer` (runtime/resume.py says when).

- `Trainer.train()` without `resume_from_checkpoint` resumes from the last `checkpoint-N` of `output_dir` that this
  run's lineage wrote (runtime/lineage.py); `resume_from_checkpoint=False` (or a path, or True) is the script's own
  choice and is kept. A `checkpoint-N` of a stranger is left alone, and rank 0 says so.
- Every checkpoint the Trainer writes is listed in the lineage file once it is whole.
- When a rank is told to stop (SIGTERM), every rank agrees at the end of the step, the Trainer saves `checkpoint-N`
  there (its model, optimizer, scheduler, RNG and trainer state: what `resume_from_checkpoint` reads), skips the
  evaluation it may have had due, and the rank ends with 143.

In a smoke run's second start (ops/resume_check.py) the Trainer trains `smoke_steps` steps past the step it resumed
at, as the first start trained `smoke_steps` steps. Applied when the user's code imports `transformers.trainer`.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from typing import Any

from vdk.plugin.ml_training.runtime import lineage as lineages
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import resume

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def patch(module: Any) -> None:
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.train, "_vdk_resume", False):
        return
    from transformers.trainer_callback import TrainerCallback

    class StopAtStepEnd(TrainerCallback):
        """Once the ranks agree to stop: save now, evaluate nothing more, end the training."""

        def on_step_end(self, args, state, control, **kwargs):
            if resume.agreed():
                control.should_save = True
                control.should_evaluate = False
                control.should_training_stop = True
            return control

    class SayResumed(TrainerCallback):
        def __init__(self, resumed_from: str | None):
            self.resumed_from = resumed_from

        def on_train_begin(self, args, state, control, **kwargs):
            if self.resumed_from:
                name = os.path.basename(self.resumed_from.rstrip(os.sep))
                resume.resumed(name, state.global_step, state.max_steps, lineages.TRANSFORMERS)
            return control

    train_signature = inspect.signature(trainer.train)

    def make_train(original):
        @functools.wraps(original)
        def train(self, *args, **kwargs):
            try:
                bound = train_signature.bind(self, *args, **kwargs)
            except TypeError:
                return original(self, *args, **kwargs)  # the Trainer's own error
            chosen = bound.arguments.get("resume_from_checkpoint")
            if chosen is None:
                found = _last_checkpoint(self)
                if found is not None:
                    bound.arguments["resume_from_checkpoint"] = chosen = found
            elif chosen is True:
                from transformers.trainer_utils import get_last_checkpoint

                chosen = get_last_checkpoint(self.args.output_dir) if os.path.isdir(self.args.output_dir) else None
            path = chosen if isinstance(chosen, str) else None
            _smoke_steps_past(self, path)
            _replace_callbacks(self, StopAtStepEnd(), SayResumed(path))
            with resume.training():
                return original(*bound.args, **bound.kwargs)

        train._vdk_resume = True  # type: ignore[attr-defined]  # attribute of a function object
        return train

    def make_save(original):
        @functools.wraps(original)
        def _save_checkpoint(self, model, trial=None, *args, **kwargs):
            result = original(self, model, trial, *args, **kwargs)
            step = self.state.global_step
            path = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{step}")
            stopping = resume.stopping()
            resume.saved(path, lineages.TRANSFORMERS, step, on_stop=stopping)
            if stopping:
                raise resume.StoppedToResume(os.path.basename(path))
            return result

        return _save_checkpoint

    trainer.train = make_train(trainer.train)
    trainer._save_checkpoint = make_save(trainer._save_checkpoint)


def _replace_callbacks(trainer: Any, *callbacks: Any) -> None:
    """This run's callbacks of ours, once (a second `train()` of the same Trainer gets fresh ones)."""
    names = {type(c).__name__ for c in callbacks}
    for old in list(trainer.callback_handler.callbacks):
        if type(old).__name__ in names and type(old).__module__ == __name__:
            trainer.callback_handler.remove_callback(old)
    for callback in callbacks:
        trainer.add_callback(callback)


def _last_checkpoint(trainer: Any) -> str | None:
    """The last checkpoint of this run's lineage in the Trainer's output_dir; the others there are said to be left."""
    lineage = resume.lineage()
    output_dir = getattr(trainer.args, "output_dir", None)
    if lineage is None or not output_dir or not os.path.isdir(output_dir):
        return None
    root = os.path.realpath(output_dir)
    mine = [
        c
        for c in lineage.checkpoints(lineages.TRANSFORMERS)
        if os.path.dirname(os.path.realpath(c.path.rstrip(os.sep))) == root
    ]
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        if _CHECKPOINT.match(name) and os.path.isdir(path) and not lineage.is_mine(path):
            resume.not_resumed(f"{output_dir}/{name}", "this run did not write it (the job's own, or a stranger's)")
    if not mine:
        return None
    return max(enumerate(mine), key=lambda pair: (pair[1].step, pair[0]))[1].path


def _smoke_steps_past(trainer: Any, checkpoint: str | None) -> None:
    """A smoke run's second start trains smoke_steps steps past the one it resumed at (max_steps was smoke_steps)."""
    if checkpoint is None or os.environ.get(protocol.SMOKE_RESUME) != protocol.SMOKE_RESTART:
        return
    try:
        with open(os.path.join(checkpoint, "trainer_state.json"), encoding="utf-8") as f:
            step = int(json.load(f).get("global_step") or 0)
        trainer.args.max_steps = step + int(os.environ.get(protocol.SMOKE_STEPS, "1"))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
