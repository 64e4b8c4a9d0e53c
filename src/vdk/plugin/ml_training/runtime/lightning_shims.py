"""Smoke-run adaptations of PyTorch Lightning's Trainer, applied when (and if) the user's code imports
Lightning: its logs and checkpoints go to the run directory, and `devices`/`num_nodes` meant for the
cluster shrink to the smoke run's layout (torchrun started `processes` ranks on one node; Lightning
refuses a layout that does not match the processes it finds)."""

from __future__ import annotations

from typing import Any

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations
from vdk.plugin.ml_training.runtime.patching import with_arguments

TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")


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
    return changed


def _patch_trainer(module: Any, a: Adaptations, processes: int, root_dir: str | None) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or getattr(cls.__init__, "_vdk_smoke", False):
        return

    def adapt(arguments: dict) -> None:
        for change in adapt_trainer_arguments(arguments, processes, root_dir):
            a.note(change)

    def make(original):
        wrapper = with_arguments(original, adapt)
        wrapper._vdk_smoke = True  # type: ignore[attr-defined]  # attribute of a function object
        return wrapper

    a.replace(cls, "__init__", make)


def install(a: Adaptations, processes: int, root_dir: str | None) -> None:
    """Adapt Lightning's Trainer now if it is imported already, else when the user's code imports it."""
    for name in TRAINER_MODULES:
        post_import.when_imported(name, lambda module: _patch_trainer(module, a, processes, root_dir))
