"""Automatic resume, and a checkpoint on the way out, for the frameworks that have a checkpoint format: a Hugging
Face `Trainer` (hf_resume.py), Lightning (lightning_resume.py) and Accelerate (accelerate_resume.py). Installed in
every training process of a run whose `resume` is `auto` (VDK_ML_TRAINING_RESUME), when the user's code imports
the framework; a script that imports none of them is left as it is.

- Resume: when the working directory holds a checkpoint this run's lineage wrote (runtime/lineage.py), the
  framework starts from the last one, with no change to the script, and rank 0 says so:
  `[vdk-ml-training] resume: resumed from checkpoint-1200 (step 1200 of 5000)`.
- The stop: SIGTERM (the kubelet's, passed on by torchrun's agent: a preemption, an eviction, a drain, `vdk execute
  --cancel`) asks a framework that is training to save a checkpoint at the end of the current step, then the rank
  exits with 143 (128 + SIGTERM), as a process ended by that signal does. The ranks agree on the step: every step,
  one 4-byte all-reduce on the CPU (a gloo group of its own, no wait for the GPU) tells each rank whether any was
  told, so that a multi-node run of which one pod is evicted saves one consistent checkpoint. A SIGTERM outside a
  framework's training (loading data, after the last step) ends the process as before; a script's own handler runs
  too; Lightning has its own (it stops at the end of the step, lightning_resume.py saves there).

This process's state is kept here, in an imported module, for every path of the process. Standard library at
import; torch when the ranks agree.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.lineage import Lineage
from vdk.plugin.ml_training.vocabulary import wire

AUTO = "auto"
OFF = "off"
EXIT_CODE = 128 + signal.SIGTERM
MARK = wire.mark(wire.RESUME)
STOP_MARK = wire.mark(wire.STOP)


class StoppedToResume(SystemExit):
    """Raised once a framework saved its checkpoint on the way out: the rank ends as SIGTERM would end it (143).
    A SystemExit, so `except Exception` in the user's code or a library does not swallow it."""

    def __init__(self, checkpoint: str = ""):
        super().__init__(EXIT_CODE)
        self.checkpoint = checkpoint


class _State:
    def __init__(self, lineage: Lineage):
        self.lineage = lineage
        self.requested = False  # this process was told to stop
        self.agreed = False  # the ranks agreed to stop at the end of this step
        self.training = 0  # frameworks training now (a SIGTERM then waits for the end of the step)
        self.previous: Any = None  # the SIGTERM handler before ours
        self.armed = False
        self.group: Any = None  # the gloo group the ranks agree in
        self.steps = 0  # optimizer steps of this process (accelerate_resume.py's save point)


_state: _State | None = None


def install() -> bool:
    """When the run's `resume` is auto and it has a name: this process's state (once). The caller adapts each
    framework when the code imports it (bootstrap.py: hf_resume, lightning_resume, accelerate_resume)."""
    global _state
    if os.environ.get(protocol.RESUME, OFF).strip().lower() != AUTO or _state is not None:
        return False
    lineage = Lineage.of_this_process()
    if lineage is None:
        return False
    _state = _State(lineage)
    post_import.when_imported("torch", _count_steps)
    return True


def lineage() -> Lineage | None:
    return _state.lineage if _state is not None else None


def is_main() -> bool:
    """Global rank 0: the rank that writes the lineage file and says what happened."""
    try:
        return int(os.environ.get("RANK", "0")) == 0
    except ValueError:
        return True


def say(text: str, mark: str = MARK) -> None:
    """One line of rank 0's (every rank's for a stop: each is told on its own), in one write."""
    sys.stdout.write(f"{mark} {text}\n")
    sys.stdout.flush()


def resumed(checkpoint: str, step: int, total: int | None = None, framework: str = "") -> None:
    """A framework resumed: rank 0 says so; the progress lines carry it; a smoke run's second start records it."""
    if not is_main():
        return
    of = f" of {total}" if total else ""
    say(f"resumed from {checkpoint} (step {step}{of})")
    from vdk.plugin.ml_training.runtime import progress_lines

    progress_lines.note_resumed(checkpoint, step)
    if os.environ.get(protocol.SMOKE_RESUME) == protocol.SMOKE_RESTART:
        from vdk.plugin.ml_training.runtime import smoke_resume

        smoke_resume.framework_resumed(framework, checkpoint, step)


def not_resumed(checkpoint: str, why: str) -> None:
    """A checkpoint in the directory that is not this run's lineage's: rank 0 says it was left alone."""
    if is_main():
        say(f"{checkpoint} is not resumed from: {why}")


def saved(path: str, framework: str, step: int, on_stop: bool = False, position: dict | None = None) -> None:
    """A framework wrote a whole checkpoint: rank 0 lists it in the lineage file (once it is whole: a checkpoint cut
    short by a kill is never listed, so never resumed from)."""
    if _state is None or not is_main():
        return
    _state.lineage.record(path, framework, step, on_stop, position)
    if on_stop:
        say(f"checkpoint {os.path.basename(path.rstrip(os.sep))} (step {step}) written on the way out", STOP_MARK)
        if os.environ.get(protocol.SMOKE_RESUME) == protocol.SMOKE_STOP:
            from vdk.plugin.ml_training.runtime import smoke_resume

            smoke_resume.saved_on_stop(os.path.basename(path.rstrip(os.sep)), step)


# --- the stop ------------------------------------------------------------------------------------------------


@contextmanager
def training() -> Iterator[None]:
    """A framework trains in this block: SIGTERM asks it to stop at the end of its step (`arm`)."""
    if _state is None:
        yield
        return
    arm()
    _state.training += 1
    try:
        yield
    finally:
        _state.training -= 1


def keep_training() -> None:
    """A framework trains from here to the end of the process (Accelerate: the script owns the loop)."""
    if _state is not None:
        arm()
        _state.training += 1


def arm() -> None:
    """Take SIGTERM (once per process; the main thread only), keeping the handler before ours: a script's own runs
    after ours; the default action is taken when no framework is training."""
    import threading

    if _state is None or _state.armed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return  # a process that ignores SIGTERM is not stopped by it: nothing to save
    _state.previous = previous
    signal.signal(signal.SIGTERM, _on_sigterm)
    _state.armed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    state = _state
    if state is None or not state.training:
        _as_before(signum, frame)
        return
    if not state.requested:
        state.requested = True
        from vdk.plugin.ml_training.runtime import rank_process

        rank_process.dump_stacks_now()  # where it was, as faulthandler says it of a rank that SIGTERM stops
        say("SIGTERM: the checkpoint is written at the end of the current step, then this rank ends", STOP_MARK)
    previous = state.previous
    if callable(previous):
        previous(signum, frame)


def _as_before(signum: int, frame: Any) -> None:
    """No framework is training: SIGTERM does what it did without us (a script's handler, or the default action, the
    stack dump of a local run included)."""
    previous = _state.previous if _state is not None else None
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from vdk.plugin.ml_training.runtime import rank_process

    rank_process.dump_stacks_again_on(signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)


def stopping() -> bool:
    """Whether the ranks agreed to stop at the end of this step (what `agreed` found, without asking again)."""
    return _state is not None and _state.agreed


def agreed() -> bool:
    """Whether any rank was told to stop: at the end of a step, on every rank (a collective when distributed)."""
    state = _state
    if state is None:
        return False
    if state.agreed:
        return True
    flag = state.requested
    try:
        flag = _any_rank(state, flag)
    except Exception:  # noqa: BLE001 - a broken process group: this rank's own word
        pass
    state.agreed = flag
    return flag


def _any_rank(state: _State, flag: bool) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return flag
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    if state.group is None:
        state.group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device="cpu")
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=state.group)
    return bool(value.item())


def steps() -> int:
    """Optimizer steps this process took (any optimizer, counted once per step call)."""
    return _state.steps if _state is not None else 0


def _count_steps(_torch: Any) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def after(*_: Any) -> None:
        if _state is not None:
            _state.steps += 1

    register_optimizer_step_post_hook(after)
