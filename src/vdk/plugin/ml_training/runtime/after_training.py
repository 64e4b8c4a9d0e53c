"""What ran after the end of a smoke run's first epoch, and after its training (epochs.py decides which is which),
each label backed by what the runtime saw: a save is a save that returned (`torch.save`, safetensors, a
framework's checkpoint counted once however many files it writes); an evaluation is a pass over a DataLoader whose
forward ran in eval mode or without gradients, or a framework's own evaluation event (Lightning's validation and
test, the Trainer's evaluate); a push to the Hugging Face Hub runs up to its network call (the files it would
upload are written, into a temporary directory) and is counted then: a smoke run pushes nothing (`stand_in_pushes`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vdk.plugin.ml_training.runtime import post_import


class Phase:
    """What ran in one stretch of the script: saves, evaluations (kind, batches)."""

    def __init__(self) -> None:
        self.saves = 0
        self.pushes = 0  # pushes to the Hub, checked up to the network call
        self.evaluations: list[tuple[str, int]] = []
        self._saving = 0

    def saved(self) -> None:
        if not self._saving:
            self.saves += 1

    def saving(self) -> _Saving:
        return _Saving(self)

    def pushing(self) -> _Saving:
        """A push to the Hub: the save it makes of what it uploads is the push's, not a save of the script's."""
        return _Saving(self, push=True)

    def evaluated(self, kind: str, batches: int) -> None:
        self.evaluations.append((kind, batches))

    def take(self, other: Phase) -> None:
        """What `other` counted belongs here (it turned out to be this stretch's)."""
        self.saves += other.saves
        self.pushes += other.pushes
        self.evaluations += other.evaluations
        other.saves, other.pushes, other.evaluations = 0, 0, []

    def items(self) -> tuple[str, ...]:
        """`evaluation (2 batches)`, `test (1 batch)`, `1 save`, in that order."""
        out = []
        for kind in dict.fromkeys(kind for kind, _ in self.evaluations):
            runs = [batches for k, batches in self.evaluations if k == kind]
            batches = sum(runs)
            times = f"{len(runs)} {_plural(kind)}" if len(runs) > 1 else kind
            out.append(f"{times} ({batches} batch{'es' if batches != 1 else ''})" if batches else times)
        if self.saves:
            out.append(f"{self.saves} save{'s' if self.saves != 1 else ''}")
        if self.pushes:
            out.append(f"{self.pushes} Hub push{'es' if self.pushes != 1 else ''} (checked up to the network call)")
        return tuple(out)


def _plural(kind: str) -> str:
    return {"validation": "validations", "test": "tests", "prediction": "predictions"}.get(kind, kind + "s")


class _Saving:
    """A save that counts once, when it returned (however many files it wrote)."""

    def __init__(self, phase: Phase, push: bool = False):
        self.phase = phase
        self.push = push

    def __enter__(self) -> None:
        self.phase._saving += 1

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self.phase._saving -= 1
        if kind is not None:
            return
        if self.push:
            self.phase.pushes += 1
        else:
            self.phase.saved()


# The savers of one file each, counted when they return: (module, function).
FILE_SAVERS = (("torch", "save"), ("safetensors.torch", "save_file"), ("safetensors.torch", "save_model"))
# Framework saves of several files, counted once: (module, class, method).
FRAMEWORK_SAVES = (
    ("transformers.modeling_utils", "PreTrainedModel", "save_pretrained"),
    ("transformers.trainer", "Trainer", "save_model"),
    ("transformers.trainer", "Trainer", "_save_checkpoint"),
    ("lightning.pytorch.trainer.trainer", "Trainer", "save_checkpoint"),
    ("pytorch_lightning.trainer.trainer", "Trainer", "save_checkpoint"),
    ("accelerate.accelerator", "Accelerator", "save_state"),
    ("accelerate.accelerator", "Accelerator", "save_model"),
)


def count_saves(adaptations: Any, active: Callable[[], Any]) -> None:
    """Count the saves of the watch `active()` returns: each file saver, each framework's save once."""

    def file_saver(original: Callable) -> Callable:
        def save(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            watch = active()
            if watch is not None:
                watch.saved()
            return result

        return save

    def framework_save(original: Callable) -> Callable:
        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            watch = active()
            if watch is None:
                return original(*args, **kwargs)
            with watch.saving():
                return original(*args, **kwargs)

        save._vdk_counts_saves = True  # type: ignore[attr-defined]  # attribute of a function object
        return save

    for name, function in FILE_SAVERS:

        def patch_file_saver(module: Any, function: str = function) -> None:
            adaptations.replace(module, function, file_saver)

        post_import.when_imported(name, patch_file_saver)
    for name, cls, method in FRAMEWORK_SAVES:

        def patch(module: Any, cls: str = cls, method: str = method) -> None:
            owner = getattr(module, cls, None)
            if owner is not None and not getattr(getattr(owner, method, None), "_vdk_counts_saves", False):
                adaptations.replace(owner, method, framework_save)

        post_import.when_imported(name, patch)


# What pushes to the Hub, each replaced in a smoke run by what it does before its network call: (module, class).
SAVE_PRETRAINED_PUSHERS = (
    ("transformers.utils.hub", "PushToHubMixin"),  # configs, processors
    ("transformers.modeling_utils", "PreTrainedModel"),  # each overrides it
    ("transformers.tokenization_utils_base", "PreTrainedTokenizerBase"),
)
TRAINER_PUSHERS = (("transformers.trainer", "Trainer"),)


def stand_in_pushes(adaptations: Any, active: Callable[[], Any]) -> None:
    """A smoke run's `push_to_hub`: the files are written as the push writes them before uploading (a model's,
    tokenizer's or config's save_pretrained into a temporary directory; the Trainer's save_model into its output
    directory), then counted in the watch `active()` returns; the network is never called (offline, and a smoke
    run's model is no model to publish)."""

    def mixin_push(original: Callable) -> Callable:
        @functools.wraps(original)
        def push_to_hub(self: Any, repo_id: str, *args: Any, **kwargs: Any) -> None:
            import tempfile

            shard = {"max_shard_size": kwargs["max_shard_size"]} if "max_shard_size" in kwargs else {}
            with _pushing(active), tempfile.TemporaryDirectory() as directory:
                self.save_pretrained(directory, **shard)

        return push_to_hub

    def trainer_push(original: Callable) -> Callable:
        @functools.wraps(original)
        def push_to_hub(self: Any, *args: Any, **kwargs: Any) -> None:
            with _pushing(active):
                self.save_model(_internal_call=True)

        return push_to_hub

    pushers = [(p, mixin_push) for p in SAVE_PRETRAINED_PUSHERS] + [(p, trainer_push) for p in TRAINER_PUSHERS]
    for (name, cls), make in pushers:

        def patch(module: Any, cls: str = cls, make: Callable = make) -> None:
            owner = getattr(module, cls, None)
            if owner is not None and "push_to_hub" in vars(owner):  # its own, not one patched already
                adaptations.replace(owner, "push_to_hub", make)

        post_import.when_imported(name, patch)


def _pushing(active: Callable[[], Any]) -> Any:
    import contextlib

    watch = active()
    return watch.pushing() if watch is not None else contextlib.nullcontext()
