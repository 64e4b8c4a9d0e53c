"""Smoke-run adaptations of PyTorch Lightning's Trainer, applied when (and if) the user's code imports
Lightning: its logs and checkpoints go to the run directory, `devices`/`num_nodes` meant for the cluster shrink to
the smoke run's layout (torchrun started `processes` ranks on one node; Lightning refuses a layout that does not
match the processes it finds), it trains in full precision (its mixed precision is named as not checked), and its
fit ends after the first epoch (with that epoch's validation and checkpoints): what the script does after
`trainer.fit()` is after training (epochs.py). Its validation, test and prediction are told as evaluations."""

from __future__ import annotations

from typing import Any

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import with_arguments

TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
LIGHTNING = "Lightning"
# Lightning's precision settings that are not full precision -> what the smoke run turns off (ops/smoke_gaps.py)
_PRECISION = {"16": "fp16", "16-mixed": "fp16", "16-true": "fp16", "bf16": "bf16", "bf16-mixed": "bf16"}
_PRECISION.update({"bf16-true": "bf16", "transformer-engine": "fp8", "transformer-engine-float16": "fp8"})


def adapt_trainer_arguments(arguments: dict, processes: int, root_dir: str | None) -> list[str]:
    """Edit Trainer(...) arguments by name; returns what was changed, for the summary."""
    changed = []
    if root_dir:
        arguments["default_root_dir"] = root_dir  # nothing of a smoke run lands in the job directory
    devices = arguments.get("devices")
    count = int(devices) if isinstance(devices, int) or (isinstance(devices, str) and devices.isdigit()) else None
    if count is not None and count > processes:
        arguments["devices"] = processes
        changed.append(f"Lightning devices={count} -> {processes}")
    nodes = arguments.get("num_nodes")
    if isinstance(nodes, int) and nodes > 1:
        arguments["num_nodes"] = 1
        changed.append(f"Lightning num_nodes={nodes} -> 1")
    precision = str(arguments.get("precision") or "")
    if precision in _PRECISION:
        arguments["precision"] = "32-true"
        changed.append(f"Lightning precision={precision} -> 32-true")
    return changed


def turned_off(precision: Any) -> str | None:
    """What a Trainer's `precision` asks for that the smoke run turns off (fp16, bf16), or None."""
    return _PRECISION.get(str(precision or ""))


def _patch_trainer(module: Any, a: Adaptations, processes: int, root_dir: str | None) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or getattr(cls.__init__, "_vdk_smoke", False):
        return
    callbacks = _smoke_callback(module.__name__)

    def adapt(arguments: dict) -> None:
        off = turned_off(arguments.get("precision"))
        if off:
            a.turn_off(off)
        for change in adapt_trainer_arguments(arguments, processes, root_dir):
            a.note(change)
        if callbacks is not None:
            given = arguments.get("callbacks")
            listed = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
            arguments["callbacks"] = [*listed, callbacks()]

    def make(original):
        wrapper = with_arguments(original, adapt)
        wrapper._vdk_smoke = True  # type: ignore[attr-defined]  # attribute of a function object
        return wrapper

    def make_fit(original):
        def fit(self, *args, **kwargs):
            from vdk.plugin.ml_training.runtime import epochs

            result = original(self, *args, **kwargs)
            watch = epochs.active()
            if watch is not None and watch.framework_finished:
                watch.training_ended(f"{LIGHTNING}'s fit() returned after its first epoch")
            return result

        return fit

    a.replace(cls, "__init__", make)
    a.replace(cls, "fit", make_fit)


def _smoke_callback(trainer_module: str) -> Any:
    """The class of the callback every Trainer of a smoke run gets (None without Lightning's callbacks module)."""
    import importlib

    try:
        base = importlib.import_module(trainer_module.rsplit(".trainer.", 1)[0] + ".callbacks").Callback
    except (ImportError, AttributeError):
        return None

    class SmokeRunEnd(base):  # type: ignore[misc, valid-type]  # Lightning's Callback, found at run time
        """Fit ends after the first epoch, with its validation and checkpoints; evaluations are told."""

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            from vdk.plugin.ml_training.runtime import epochs
            from vdk.plugin.ml_training.runtime import smoke_resume

            watch = epochs.active()
            if watch is None or watch.trained_on is not None or smoke_resume.first_start():
                return  # the resume check's first start goes on to the second epoch, where it is preempted
            trainer.fit_loop.min_epochs = None  # should_stop waits for min_epochs and min_steps otherwise
            trainer.fit_loop.epoch_loop.min_steps = None
            trainer.should_stop = True
            watch.framework_finished = f"{LIGHTNING} ended its fit after the first epoch"

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if not getattr(trainer, "sanity_checking", False):
                _evaluated("validation")

        def on_test_end(self, trainer: Any, pl_module: Any) -> None:
            _evaluated("test")

        def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
            _evaluated("prediction")

    return SmokeRunEnd


def _evaluated(kind: str) -> None:
    from vdk.plugin.ml_training.runtime import epochs

    watch = epochs.active()
    if watch is not None:
        watch.evaluated(kind)


def install(a: Adaptations, processes: int, root_dir: str | None) -> None:
    """Adapt Lightning's Trainer now if it is imported already, else when the user's code imports it."""
    for name in TRAINER_MODULES:
        post_import.when_imported(name, lambda module: _patch_trainer(module, a, processes, root_dir))
