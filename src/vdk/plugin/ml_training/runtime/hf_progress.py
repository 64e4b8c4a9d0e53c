"""The number of steps of a Hugging Face `Trainer` run, for progress lines: every Trainer gets a
callback that hands `TrainerState.max_steps` (and the steps a resumed run already did) to the
reporter when training begins. Applied when the user's code imports `transformers.trainer`."""

from __future__ import annotations

import functools

from vdk.plugin.ml_training.runtime import post_import


def follow_trainers(reporter) -> None:
    post_import.when_imported("transformers.trainer", lambda module: _add_callback(module, reporter))


def _add_callback(module, reporter) -> None:
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.__init__, "_vdk_progress", False):
        return
    from transformers.trainer_callback import TrainerCallback

    class ProgressTotal(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            try:
                reporter.set_total(state.max_steps, done=state.global_step)
            except Exception as e:  # noqa: BLE001 - reporting must never break training
                reporter.fail(e)

    callback = ProgressTotal()
    original = trainer.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            self.add_callback(callback)
        except Exception as e:  # noqa: BLE001 - no progress lines, but the Trainer is the user's as ever
            reporter.fail(e)

    __init__._vdk_progress = True  # type: ignore[attr-defined]  # attribute of a function object
    trainer.__init__ = __init__
