"""CPU and smoke-run adaptations of Hugging Face `transformers` and `accelerate`, applied when the user's
code imports them (`post_import`), so a script that uses neither never pays for importing them.

On CPU (a rehearsal of GPU code, `smoke_steps` None) only what CPUs cannot do is switched off. In a smoke
run a `Trainer` trains `smoke_steps` steps, then evaluates once (when it has an eval dataset) and saves one
checkpoint, into the run directory: what the cluster run does at the end of an epoch or at its
`save_steps`, done now. The loss the summary shows is the one the Trainer logs.
"""

from __future__ import annotations

import functools
import weakref

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.patching import Adaptations

TRAINER = "the Hugging Face Trainer"


# Reporting integrations of `report_to` -> the module the Trainer imports for each on the cluster
# (transformers.integrations: is_<name>_available). "all" reports to those installed; "none" to none.
REPORTING_MODULES = {
    "wandb": "wandb",
    "mlflow": "mlflow",
    "tensorboard": "tensorboard",
    "comet_ml": "comet_ml",
    "clearml": "clearml",
    "neptune": "neptune",
    "dvclive": "dvclive",
    "codecarbon": "codecarbon",
    "aim": "aim",
    "azure_ml": "azureml",
    "dagshub": "dagshub",
    "flyte": "flytekit",
    "swanlab": "swanlab",
    "trackio": "trackio",
}


def adapt_training_arguments(
    args, smoke_steps: int | None, output_dir: str | None, saves: bool = True
) -> list[tuple[str, str | None]]:
    """Edit a TrainingArguments before its validation runs: full precision (the Trainer trains on the
    virtual GPUs); for a smoke run (`smoke_steps` given) also `smoke_steps` steps, nothing reported or
    pushed, checkpoints in `output_dir` (none at all unless `saves`). Returns what the cluster run will do that
    the smoke run turned off: (what, the module it imports there, or None)."""
    off: list[tuple[str, str | None]] = []
    for name in ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "torch_compile"):
        if getattr(args, name, False):
            setattr(args, name, False)
            off.append((name, None))
    if getattr(args, "tf32", None):
        args.tf32 = None  # TF32 is a GPU feature: asking for it on CPU is an error
    for name in ("deepspeed", "fsdp"):
        if getattr(args, name, None):
            setattr(args, name, None if name == "deepspeed" else "")
            off.append((name, "deepspeed" if name == "deepspeed" else None))
    if smoke_steps is None:
        return off
    if getattr(args, "push_to_hub", False):
        args.push_to_hub = False
        off.append(("push_to_hub", None))
    off += [(f"report_to={name}", module) for name, module in _reporting(getattr(args, "report_to", None))]
    args.report_to = "none"
    args.max_steps = smoke_steps
    if not saves:  # a smoke run that stops after smoke_steps steps (smoke_epoch_end = false)
        args.save_strategy = "no"
        args.load_best_model_at_end = False  # needs saving
    if output_dir:
        args.output_dir = output_dir  # nothing of a smoke run lands in the user's output directory
    return off


def _reporting(report_to) -> list[tuple[str, str | None]]:
    """(integration, the module it needs) of a `report_to` (a name, a list of names, "all", "none", None)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    out: list[tuple[str, str | None]] = []
    for name in names:
        name = str(name).strip()
        if name and name not in ("none", "all"):
            out.append((name, REPORTING_MODULES.get(name, name)))
    return out


def _patch_training_arguments(
    module, a: Adaptations, smoke_steps: int | None, output_dir: str | None, saves: bool
) -> None:
    cls = getattr(module, "TrainingArguments", None)
    if cls is None or getattr(cls.__post_init__, "_vdk_smoke", False):
        return
    original = cls.__post_init__
    what = f"HF TrainingArguments set for {'the smoke run' if smoke_steps is not None else 'CPU'}"

    def __post_init__(self, *args, **kwargs):
        for off, needs in adapt_training_arguments(self, smoke_steps, output_dir, saves):
            a.turn_off(off, needs)
        a.note(what)
        return original(self, *args, **kwargs)

    __post_init__._vdk_smoke = True  # type: ignore[attr-defined]  # attribute of a function object
    a.replace(cls, "__post_init__", lambda _: __post_init__)


def _patch_accelerator(module, a: Adaptations) -> None:
    """Full precision (its mixed precision is named as not checked); a smoke run's step counter sees the loss the
    script passes to `backward()`, not the one Accelerate divides by the gradient accumulation steps."""
    cls = getattr(module, "Accelerator", None)
    if cls is None or getattr(cls.__init__, "_vdk_smoke", False):
        return
    from vdk.plugin.ml_training.runtime.patching import with_arguments

    def on_cpu(arguments: dict) -> None:
        precision = arguments.get("mixed_precision")
        if precision not in (None, "no"):
            a.note("Accelerate mixed precision off")
            a.turn_off(ACCELERATE_PRECISION.get(str(precision), str(precision)))
        arguments["mixed_precision"] = "no"

    def make(original):
        wrapper = with_arguments(original, on_cpu)
        wrapper._vdk_smoke = True  # type: ignore[attr-defined]  # attribute of a function object
        return wrapper

    def make_backward(original):
        @functools.wraps(original)
        def backward(self, loss, *args, **kwargs):
            counter = _counter()
            if counter is None:
                return original(self, loss, *args, **kwargs)
            with counter.unscaled(loss):
                return original(self, loss, *args, **kwargs)

        return backward

    a.replace(cls, "__init__", make)
    a.replace(cls, "backward", make_backward)


# Accelerate's mixed_precision -> what the smoke run turns off (ops/smoke_gaps.py names it as not checked)
ACCELERATE_PRECISION = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


def _patch_trainer(module, a: Adaptations, epoch_end: bool) -> None:
    """Every Trainer gets the smoke run's callback; its training and checkpoints are known to the epoch watch."""
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.__init__, "_vdk_smoke", False):
        return
    from transformers.trainer_callback import TrainerCallback

    from vdk.plugin.ml_training.runtime import epochs

    class SmokeRunEnd(TrainerCallback):
        """After the last smoke step: log (the loss the summary shows), evaluate when there is an eval
        dataset, save a checkpoint; once, even if the step also ends an epoch."""

        def __init__(self, owner):
            self.owner = weakref.ref(owner)
            self.forced_at: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if state.max_steps and state.global_step >= state.max_steps:
                owner = self.owner()
                control.should_log = True
                if not epoch_end:
                    return control
                from vdk.plugin.ml_training.runtime import smoke_resume

                if smoke_resume.preempt():  # the resume check's first start: SIGTERM, the Trainer saves and stops
                    return control
                control.should_save = True
                control.should_evaluate = owner is not None and owner.eval_dataset is not None
                self.forced_at = state.global_step
                watch = epochs.active()
                if watch is not None:  # what follows (evaluation, checkpoint, the rest of the script) is "after"
                    watch.framework_finished = f"{TRAINER} ended its training after smoke_steps steps"
            return control

        def on_epoch_end(self, args, state, control, **kwargs):
            if self.forced_at == state.global_step:
                control.should_evaluate = control.should_save = False
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            counter = _counter()
            if counter is not None and isinstance((logs or {}).get("loss"), (int, float)):
                counter.log_loss(float(logs["loss"]))

        def on_evaluate(self, args, state, control, **kwargs):
            watch = epochs.active()
            if watch is not None:
                watch.evaluated("evaluation")

        def on_predict(self, args, state, control, metrics=None, **kwargs):
            watch = epochs.active()
            if watch is not None:
                watch.evaluated("prediction")

    def make_init(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.add_callback(SmokeRunEnd(self))

        __init__._vdk_smoke = True  # type: ignore[attr-defined]  # attribute of a function object
        return __init__

    def make_train(original):
        @functools.wraps(original)
        def train(self, *args, **kwargs):
            watch = epochs.active()
            if watch is None:
                return original(self, *args, **kwargs)
            outer, watch.framework = watch.framework, TRAINER  # it stops itself after max_steps
            try:
                result = original(self, *args, **kwargs)
            finally:
                watch.framework = outer
            if watch.framework_finished:  # what the script does from here on is after training
                watch.training_ended(f"{TRAINER}'s train() returned after smoke_steps steps")
            return result

        return train

    a.replace(trainer, "__init__", make_init)
    a.replace(trainer, "train", make_train)


_counter_of_process = None  # the smoke run's StepCounter of this process (bootstrap.py)


def count_with(counter) -> None:
    """The step counter whose loss is the one the Trainer logs."""
    global _counter_of_process
    _counter_of_process = counter


def _counter():
    return _counter_of_process


def install(a: Adaptations, smoke_steps: int | None, output_dir: str | None, epoch_end: bool = True) -> None:
    """Adapt transformers/accelerate now if already imported, else when the user's code imports them.
    `smoke_steps` None: for CPU only (a whole run: steps, saving and reporting as the code says).
    `epoch_end`: the Trainer evaluates and saves once after the smoke steps (else it saves nothing)."""
    post_import.when_imported(
        "transformers.training_args", lambda m: _patch_training_arguments(m, a, smoke_steps, output_dir, epoch_end)
    )
    post_import.when_imported("accelerate.accelerator", lambda m: _patch_accelerator(m, a))
    if smoke_steps is not None:
        post_import.when_imported("transformers.trainer", lambda m: _patch_trainer(m, a, epoch_end))
