"""CPU (and smoke-run) adaptations of Hugging Face `transformers` and `accelerate`, applied when the
user's code imports them (`post_import`), so a script that uses neither never pays for importing them."""

from __future__ import annotations

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.cpu_shims import Adaptations


def adapt_training_arguments(args, smoke_steps: int | None, output_dir: str | None) -> None:
    """Edit a TrainingArguments before its validation runs: full precision (the Trainer trains on the
    virtual GPUs); for a smoke run (`smoke_steps` given) also `smoke_steps` steps, nothing saved,
    reported or pushed."""
    for name in ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "torch_compile"):
        if getattr(args, name, False):
            setattr(args, name, False)
    if getattr(args, "tf32", None):
        args.tf32 = None  # TF32 is a GPU feature: asking for it on CPU is an error
    for name in ("deepspeed", "fsdp"):
        if getattr(args, name, None):
            setattr(args, name, None if name == "deepspeed" else "")
    if smoke_steps is None:
        return
    if getattr(args, "push_to_hub", False):
        args.push_to_hub = False
    args.report_to = "none"
    args.max_steps = smoke_steps
    args.save_strategy = "no"
    args.load_best_model_at_end = False  # needs saving
    if output_dir:
        args.output_dir = output_dir  # nothing of a smoke run lands in the user's output directory


def _patch_training_arguments(module, a: Adaptations, smoke_steps: int | None, output_dir: str | None) -> None:
    cls = getattr(module, "TrainingArguments", None)
    if cls is None or getattr(cls.__post_init__, "_vdk_smoke", False):
        return
    original = cls.__post_init__
    what = f"HF TrainingArguments set for {'the smoke run' if smoke_steps is not None else 'CPU'}"

    def __post_init__(self, *args, **kwargs):
        adapt_training_arguments(self, smoke_steps, output_dir)
        a.note(what)
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

    def make(original):
        wrapper = _with_arguments(original, on_cpu)
        wrapper._vdk_smoke = True  # type: ignore[attr-defined]
        return wrapper

    a.replace(cls, "__init__", make)


def install(a: Adaptations, smoke_steps: int | None, output_dir: str | None) -> None:
    """Adapt transformers/accelerate now if already imported, else when the user's code imports them.
    `smoke_steps` None: for CPU only (a whole run: steps, saving and reporting as the code says)."""
    post_import.when_imported(
        "transformers.training_args", lambda m: _patch_training_arguments(m, a, smoke_steps, output_dir)
    )
    post_import.when_imported("accelerate.accelerator", lambda m: _patch_accelerator(m, a))
