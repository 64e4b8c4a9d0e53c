"""One rank of a case's real GPU run, cut where the smoke check cuts it: the job's script as `python` runs it, on
the real GPU with real CUDA and NCCL (none of the smoke run's CPU stand-ins, and its precision as written), with
the smoke run's end alone: every DataLoader pass cut to `smoke_steps` batches, the end of the first epoch run,
the run stopped at the first optimizer step of the second (runtime/epochs.py, the smoke check's own code); a
Hugging Face Trainer trains `smoke_steps` steps, then evaluates and saves once, as in the smoke run.

check.py runs it by path (not as a module: the job's script sees only its own directory on sys.path), in a copy
of what the job's image holds, with torchrun's variables of a world of one rank:

    python cut_rank.py RESULT.json SMOKE_STEPS EPOCH_END HIDDEN -- train.py ARGS...

HIDDEN: modules (comma-separated, or `-`) that the job's image would lack but this machine has: importing them
fails, as it would in the image. RESULT.json gets how the rank ended, where in the job's files it failed, its
steps and loss, and whether it used the GPU. Imports nothing of functional_tests: only the installed plugin.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import time
import traceback


class _Hidden(importlib.abc.MetaPathFinder):
    """Modules the job's image lacks: importing them fails as it would there."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path, target=None):  # the finder protocol
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{fullname}'", name=fullname)
        return None


def _cut_training_arguments(module, adaptations, steps: int, output_dir: str, saves: bool) -> None:
    """A Trainer's arguments as the smoke run sets them, but for precision: `steps` steps, nothing reported or
    pushed, checkpoints in `output_dir`."""
    cls = getattr(module, "TrainingArguments", None)
    if cls is None:
        return
    original = cls.__post_init__

    def __post_init__(self, *args, **kwargs):
        self.max_steps = steps
        self.report_to = "none" if not _reports(self) else self.report_to
        self.push_to_hub = False
        self.output_dir = output_dir
        if not saves:
            self.save_strategy = "no"
            self.load_best_model_at_end = False
        return original(self, *args, **kwargs)

    adaptations.replace(cls, "__post_init__", lambda _: __post_init__)


def _reports(args) -> bool:
    """A `report_to` that names an integration: kept, so that a missing package fails as on the cluster."""
    value = getattr(args, "report_to", None)
    names = [value] if isinstance(value, str) else list(value or [])
    return any(str(n).strip() not in ("", "none", "all") for n in names)


def _where(text: str, root: str) -> str | None:
    found = None
    prefix = root.rstrip("/") + "/"
    marker = 'File "'
    for line in text.splitlines():
        start = line.find(marker)
        if start < 0:
            continue
        path, _, rest = line[start + len(marker) :].partition('", line ')
        number = rest.split(",", 1)[0].strip()
        if path.startswith(prefix) and number.isdigit():
            found = f"{path[len(prefix) :]}:{number}"
    return found


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    result_path, steps, epoch_end, hidden = argv[:separator]
    entry = argv[separator + 1 :]
    steps_n, cut_epochs = int(steps), epoch_end == "1"
    workdir = os.getcwd()
    if hidden != "-":
        sys.meta_path.insert(0, _Hidden(set(hidden.split(","))))
    from vdk.plugin.ml_training.runtime import epochs
    from vdk.plugin.ml_training.runtime import hf_shims
    from vdk.plugin.ml_training.runtime import post_import
    from vdk.plugin.ml_training.runtime.bootstrap import run_entrypoint
    from vdk.plugin.ml_training.runtime.patching import Adaptations
    from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached
    from vdk.plugin.ml_training.runtime.steps import StepCounter
    from vdk.plugin.ml_training.runtime.steps import StepLimit

    adaptations = Adaptations()
    counter = StepCounter(manual_steps=True).install()
    watch = epochs.watch(counter, steps_n, adaptations) if cut_epochs else None
    if watch is None:
        StepLimit(steps_n).attach(counter)
    output_dir = os.path.join(os.path.dirname(os.path.abspath(result_path)), "hf-output")
    post_import.when_imported(
        "transformers.training_args",
        lambda m: _cut_training_arguments(m, adaptations, steps_n, output_dir, cut_epochs),
    )
    post_import.when_imported("transformers.trainer", lambda m: hf_shims._patch_trainer(m, adaptations, cut_epochs))
    hf_shims.count_with(counter)
    started = time.monotonic()
    status, error, where = "finished", "", None
    try:
        run_entrypoint(entry)
    except SmokeStepsReached:
        status = "stopped"
    except SystemExit as e:
        if e.code not in (None, 0):
            status, error = "failed", f"SystemExit: {e.code}"
            where = _where("".join(traceback.format_exception(e)), workdir)
    except BaseException as e:  # noqa: BLE001 - any failure of the script is its verdict
        status = "failed"
        text = "".join(traceback.format_exception(e))
        error = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300] if str(e) else type(e).__name__
        where = _where(text, workdir)
        sys.stderr.write(text)
    torch = sys.modules.get("torch")
    used = bool(torch is not None and torch.cuda.is_initialized())
    loss = None
    try:
        loss = counter.loss()
    except Exception:  # noqa: BLE001 - a loss that cannot be read: none
        pass
    record = {
        "status": status,
        "error": error,
        "where": where,
        "steps": counter.steps,
        "last_loss": loss,
        "seconds": round(time.monotonic() - started, 2),
        "epoch_end": bool(watch is not None and watch.after_epoch()),
        "cuda_used": used,
        "gpu": torch.cuda.get_device_name(0) if used else None,
        "max_memory_allocated": torch.cuda.max_memory_allocated() if used else None,
    }
    with open(result_path, "w") as f:
        json.dump(record, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status != "failed" else 1)  # no teardown: a process group left open must not hang the exit


if __name__ == "__main__":
    main(sys.argv[1:])
