"""Automatic resume and the checkpoint on the way out for PyTorch Lightning (runtime/resume.py says when).

- `Trainer.fit(...)` without `ckpt_path` resumes from the last checkpoint this run's lineage wrote
  (runtime/lineage.py), wherever its `ModelCheckpoint` put it (`lightning_logs/version_N/` changes with every start,
  so Lightning's own `ckpt_path="last"` would not find it); a `ckpt_path` the script gives is its own choice.
- Every checkpoint `Trainer.save_checkpoint` writes (the callbacks' too) is listed in the lineage file once whole.
- The stop is Lightning's own: its SIGTERM handler stops the fit loop at the end of the step (`SIGTERMException`);
  there, on every rank, this module saves `on-stop-step=N.ckpt` beside the `ModelCheckpoint`'s (a plain exception
  saves nothing), and the rank ends with 143 rather than the 0 that Lightning's exception would leave (a pod that
  ends with 0 is a run that succeeded).

Applied when the user's code imports Lightning's Trainer.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

from vdk.plugin.ml_training.runtime import lineage as lineages
from vdk.plugin.ml_training.runtime import resume

TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")


def patch(module: Any) -> None:
    trainer_class = getattr(module, "Trainer", None)
    if trainer_class is None or getattr(trainer_class.fit, "_vdk_resume", False):
        return
    package = module.__name__.split(".", 1)[0]  # lightning or pytorch_lightning
    callback_base = __import__(f"{package}.pytorch.callbacks" if package == "lightning" else f"{package}.callbacks",
                               fromlist=["Callback"]).Callback  # fmt: skip
    exceptions = __import__(f"{package}.pytorch.utilities.exceptions" if package == "lightning"
                            else f"{package}.utilities.exceptions", fromlist=["SIGTERMException"])  # fmt: skip
    sigterm = exceptions.SIGTERMException

    class SaveOnStop(callback_base):  # type: ignore[misc, valid-type]  # the Callback of the Lightning imported
        """Lightning stopped at the end of a step because of SIGTERM: the checkpoint to resume from."""

        def __init__(self, resumed_from: str | None):
            self.resumed_from = resumed_from

        def on_train_start(self, trainer, pl_module):
            if self.resumed_from:
                resume.resumed(os.path.basename(self.resumed_from), trainer.global_step, _total(trainer),
                               lineages.LIGHTNING)  # fmt: skip

        def on_exception(self, trainer, pl_module, exception):
            if not isinstance(exception, sigterm) or trainer.state.fn != "fit":
                return
            path = os.path.join(_checkpoint_dir(trainer), f"on-stop-step={trainer.global_step}.ckpt")
            trainer.save_checkpoint(path)

    fit_signature = inspect.signature(trainer_class.fit)

    def make_fit(original):
        @functools.wraps(original)
        def fit(self, *args, **kwargs):
            try:
                bound = fit_signature.bind(self, *args, **kwargs)
            except TypeError:
                return original(self, *args, **kwargs)
            chosen = bound.arguments.get("ckpt_path")
            if chosen is None:
                found = _last_checkpoint()
                if found is not None:
                    bound.arguments["ckpt_path"] = chosen = found
            path = chosen if isinstance(chosen, str) and os.path.isfile(chosen) else None
            self.callbacks[:] = [c for c in self.callbacks if type(c).__name__ != "SaveOnStop"]
            self.callbacks.append(SaveOnStop(path))
            with resume.training():
                try:
                    return original(*bound.args, **bound.kwargs)
                except sigterm as stopped:
                    raise resume.StoppedToResume() from stopped

        fit._vdk_resume = True  # type: ignore[attr-defined]  # attribute of a function object
        return fit

    def make_save(original):
        @functools.wraps(original)
        def save_checkpoint(self, filepath, *args, **kwargs):
            result = original(self, filepath, *args, **kwargs)
            on_stop = os.path.basename(str(filepath)).startswith("on-stop-step=")
            resume.saved(os.path.abspath(str(filepath)), lineages.LIGHTNING, self.global_step, on_stop=on_stop)
            return result

        return save_checkpoint

    trainer_class.fit = make_fit(trainer_class.fit)
    trainer_class.save_checkpoint = make_save(trainer_class.save_checkpoint)


def _last_checkpoint() -> str | None:
    lineage = resume.lineage()
    found = lineage.last(lineages.LIGHTNING) if lineage is not None else None
    return found.path if found is not None and os.path.isfile(found.path) else None


def _checkpoint_dir(trainer: Any) -> str:
    """Where the Trainer's ModelCheckpoint writes; else `checkpoints/` of its root directory."""
    callback = getattr(trainer, "checkpoint_callback", None)
    directory = getattr(callback, "dirpath", None)
    return str(directory) if directory else os.path.join(str(trainer.default_root_dir), "checkpoints")


def _total(trainer: Any) -> int | None:
    if isinstance(trainer.max_steps, int) and trainer.max_steps > 0:
        return trainer.max_steps
    try:
        total = trainer.estimated_stepping_batches
    except Exception:  # noqa: BLE001 - an unsized loader: no total
        return None
    return int(total) if isinstance(total, (int, float)) and total != float("inf") else None
