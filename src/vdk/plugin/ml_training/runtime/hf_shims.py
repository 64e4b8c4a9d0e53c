"""Smoke-run adaptations of Hugging Face `transformers` and `accelerate`, applied when the user's code
imports them (a post-import hook), so a script that uses neither never pays for importing them."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable

from vdk.plugin.ml_training.runtime.cpu_shims import Adaptations


def adapt_training_arguments(args, smoke_steps: int, output_dir: str | None) -> None:
    """Edit a TrainingArguments before its validation runs: CPU, full precision, `smoke_steps` steps,
    nothing saved, reported or pushed."""
    args.use_cpu = True
    for name in ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "torch_compile", "push_to_hub"):
        if getattr(args, name, False):
            setattr(args, name, False)
    if getattr(args, "tf32", None):
        args.tf32 = None  # TF32 is a GPU feature: asking for it on CPU is an error
    args.report_to = "none"
    args.max_steps = smoke_steps
    args.save_strategy = "no"
    args.load_best_model_at_end = False  # needs saving
    for name in ("deepspeed", "fsdp"):
        if getattr(args, name, None):
            setattr(args, name, None if name == "deepspeed" else "")
    if output_dir:
        args.output_dir = output_dir  # nothing of a smoke run lands in the user's output directory


def _patch_training_arguments(module, a: Adaptations, smoke_steps: int, output_dir: str | None) -> None:
    cls = getattr(module, "TrainingArguments", None)
    if cls is None or getattr(cls.__post_init__, "_vdk_smoke", False):
        return
    original = cls.__post_init__

    def __post_init__(self, *args, **kwargs):
        adapt_training_arguments(self, smoke_steps, output_dir)
        a.note("HF TrainingArguments set for CPU")
        return original(self, *args, **kwargs)

    __post_init__._vdk_smoke = True  # type: ignore[attr-defined]
    a.replace(cls, "__post_init__", lambda _: __post_init__)


def _patch_accelerator(module, a: Adaptations) -> None:
    cls = getattr(module, "Accelerator", None)
    if cls is None or getattr(cls.__init__, "_vdk_smoke", False):
        return
    from vdk.plugin.ml_training.runtime.cpu_shims import _with_arguments

    def on_cpu(arguments: dict) -> None:
        if arguments.get("mixed_precision") not in (None, "no"):
            a.note("Accelerate mixed precision off")
        arguments["mixed_precision"] = "no"
        arguments["cpu"] = True

    def make(original):
        wrapper = _with_arguments(original, on_cpu)
        wrapper._vdk_smoke = True  # type: ignore[attr-defined]
        return wrapper

    a.replace(cls, "__init__", make)


class _PostImportHooks(importlib.abc.MetaPathFinder):
    """Calls `hooks[name](module)` right after module `name` has been executed by its normal loader."""

    def __init__(self, hooks: dict[str, Callable]):
        self.hooks = hooks

    def find_spec(self, fullname, path, target=None):
        hook = self.hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookedLoader(spec.loader, hook)
                return spec
        return None


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader, hook: Callable):
        self.loader = loader
        self.hook = hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name):  # get_source, is_package, ... of the real loader
        return getattr(self.loader, name)


def install(a: Adaptations, smoke_steps: int, output_dir: str | None) -> None:
    """Adapt transformers/accelerate now if already imported, else when the user's code imports them."""
    hooks: dict[str, Callable] = {
        "transformers.training_args": lambda m: _patch_training_arguments(m, a, smoke_steps, output_dir),
        "accelerate.accelerator": lambda m: _patch_accelerator(m, a),
    }
    for name, hook in list(hooks.items()):
        if name in sys.modules:
            hook(sys.modules[name])
            del hooks[name]
    if hooks:
        sys.meta_path.insert(0, _PostImportHooks(hooks))
