"""The metric of a sweep's trial, taken from what the training process already shows, with no change to its
code: the values it logs through the Hugging Face Trainer (`eval_loss`, every key of its logs and evaluations)
or PyTorch Lightning (`self.log("val_acc", ...)`: the trainer's callback metrics), the training loss the step
counter keeps (`loss`), and `name=value` / `name: value` on the lines it prints.

Rank 0 of a trial (VDK_ML_TRAINING_SWEEP_METRIC names the metric) appends a metric line to
VDK_ML_TRAINING_SWEEP_METRIC_FILE when the value changed and at most once per period, and the last value and the
names it saw when the script ends (runtime/sweep_protocol.py writes and reads them). Its trial reports them to
Optuna as intermediate values. Standard library at import; any error turns it off with one warning: training
goes on.
"""

from __future__ import annotations

import functools
import io
import math
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.vocabulary import wire as words

# `name=value`, `name: value`, `'name': value` (a printed dict) on a printed line
_PRINTED = re.compile(
    r"""(?:^|(?<=[\s,;{(\[|]))['"]?([A-Za-z_][A-Za-z0-9_./-]*)['"]?\s*[:=]\s*"""
    r"""(?:tensor\()?([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?![0-9A-Za-z_.])"""
)
NAMES_MARK = words.mark(words.METRIC_NAMES)
BATCH_READ_SECONDS = 1.0  # a training batch's metrics (Lightning's) are read at most this often
LIGHTNING_TRAINERS = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
LIGHTNING_CALLBACKS = {
    "lightning.pytorch.trainer.trainer": "lightning.pytorch.callbacks",
    "pytorch_lightning.trainer.trainer": "pytorch_lightning.callbacks",
}


def printed_values(line: str) -> list[tuple[str, float]]:
    """(name, value) of every `name=value` / `name: value` on a printed line."""
    out = []
    for match in _PRINTED.finditer(line):
        try:
            out.append((match.group(1), float(match.group(2))))
        except ValueError:
            continue
    return out


class MetricWatch:
    """Follows every value the process shows and writes the metric `name`'s to `path`."""

    def __init__(self, name: str, path: str, period: float = wire.DEFAULT_METRIC_SECONDS, clock=time.monotonic):
        self.name = name
        self.path = path
        self.period = period
        self.names: set[str] = set()
        self.value: float | None = None
        self.counter: Any = None
        self._clock = clock
        self._due = 0.0
        self._written: tuple[int, float] | None = None
        self._sequence = 0
        self._logged_loss = False  # a framework or a printed line showed `loss`: the counter's is not read
        self._on = True

    # --- what feeds it ------------------------------------------------------------------------------------

    def attach(self, counter: Any) -> MetricWatch:
        """The step counter: steps number the values, its loss is `loss` when no framework logs one."""
        if self.counter is None:
            self.counter = counter
            counter.listeners.append(self._after_step)
        return self

    def record(self, name: str, value: Any) -> None:
        """A value the script showed (logged or printed)."""
        if not self._on:
            return
        number = shown_number(value)
        if number is None or not math.isfinite(number):
            return
        self.names.add(name)
        if name == "loss":
            self._logged_loss = True
        if name == self.name:
            self.value = number
            self._maybe_write()

    def _after_step(self, counter: Any, optimizer: Any) -> None:
        if self.name == "loss" and self._clock() >= self._due:
            self._read_loss()
            self._maybe_write()

    def _read_loss(self) -> None:
        if self.counter is None or self._logged_loss:
            return  # a framework logs its own loss
        try:
            loss = self.counter.loss()
        except Exception:  # noqa: BLE001 - a loss that cannot be read is no metric
            loss = None
        if loss is not None and math.isfinite(loss):
            self.value = float(loss)

    # --- what it writes -----------------------------------------------------------------------------------

    def _step(self) -> int:
        if self.counter is not None and self.counter.steps:
            return int(self.counter.steps)
        self._sequence += 1
        return self._sequence

    def _maybe_write(self, force: bool = False) -> None:
        if self.value is None or not self._on:
            return
        now = self._clock()
        if not force and now < self._due:
            return
        step = self._step()
        if self._written is not None and self._written == (step, self.value):
            return
        if self._written is not None and step <= self._written[0]:
            step = self._written[0] + 1  # a value after the last step: a later point of the curve
        self._write(wire.metric_line(step, self.value))
        self._written = (step, self.value)
        self._due = now + self.period

    def _write(self, line: str) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            self.fail(e)

    def finish(self) -> None:
        """The script ended: its last value, and every name it showed (for the smoke check's message)."""
        if not self._on:
            return
        if self.name == "loss":
            self._read_loss()
        self._maybe_write(force=True)
        names = set(self.names)
        if self.value is not None:
            names.add(self.name)  # `loss` read from the step counter
        self._write(f"{NAMES_MARK} {','.join(sorted(names))}")
        self._on = False

    def fail(self, error: Exception) -> None:
        self._on = False
        try:
            sys.stderr.write(
                words.warning(
                    f"the sweep's metric is not followed after an error ({type(error).__name__}: {error}); "
                    "training goes on"
                )
                + "\n"
            )
        except Exception:  # noqa: BLE001 - a warning that cannot be written: training goes on
            pass


class Shown:
    """The values the script shows (its trainers' logs and metrics, its printed lines), each handed as a number to
    every receiver: a sweep trial's MetricWatch, the run's series (runtime/series.py)."""

    def __init__(self, receivers: list[Any], clock=time.monotonic):
        self.receivers = receivers
        self._clock = clock
        self._batch_due = 0.0

    def record(self, name: str, value: Any) -> None:
        number = shown_number(value)
        if number is None:
            return
        for receiver in self.receivers:
            receiver.record(name, number)

    def batch_due(self) -> bool:
        """Whether a training batch's metrics are read now: at most once every BATCH_READ_SECONDS (reading a
        tensor's value waits for the device)."""
        now = self._clock()
        if now < self._batch_due:
            return False
        self._batch_due = now + BATCH_READ_SECONDS
        return True

    def fail(self, error: Exception) -> None:
        for receiver in self.receivers:
            receiver.fail(error)


def read_names(lines: list[str]) -> list[str] | None:
    """The names a finished process showed (its last names line), None when it wrote none."""
    for line in reversed(lines):
        if line.startswith(NAMES_MARK):
            return [n for n in line[len(NAMES_MARK) :].strip().split(",") if n]
    return None


# --- the sources --------------------------------------------------------------------------------------------


class _PrintedLines(io.TextIOBase):
    """sys.stdout as the script sees it: everything goes to the original stream; whole lines are also read."""

    def __init__(self, stream: Any, watch: Shown):
        self._stream = stream
        self._watch = watch
        self._partial = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        try:
            self._partial += text
            if "\n" in self._partial:
                *lines, self._partial = self._partial.split("\n")
                for line in lines:
                    if not words.is_ours(line):
                        for name, value in printed_values(line):
                            self._watch.record(name, value)
            if len(self._partial) > 65536:
                self._partial = ""
        except Exception as e:  # noqa: BLE001 - the metric stops, the script's output does not
            self._watch.fail(e)
        return written

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    # TextIOBase declares encoding a plain attribute; the wrapper answers with the stream's, read-only.
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding


def _follow_trainers(watch: Shown) -> None:
    post_import.when_imported("transformers.trainer", lambda module: _hf_callback(module, watch))
    for name in LIGHTNING_TRAINERS:
        post_import.when_imported(name, functools.partial(_lightning_callback, name=name, watch=watch))


def _hf_callback(module: Any, watch: Shown) -> None:
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.__init__, "_vdk_metrics", False):
        return
    from transformers.trainer_callback import TrainerCallback

    class Metrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            for name, value in (logs or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    watch.record(name, value)

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            self.on_log(args, state, control, logs=metrics)

    original = trainer.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            self.add_callback(Metrics())
        except Exception as e:  # noqa: BLE001 - no metric, but the Trainer is the user's as ever
            watch.fail(e)

    __init__._vdk_metrics = True  # type: ignore[attr-defined]  # attribute of a function object
    __init__.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
    trainer.__init__ = __init__


def _lightning_callback(module: Any, name: str, watch: Shown) -> None:
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer.__init__, "_vdk_metrics", False):
        return
    import importlib

    base: Any = importlib.import_module(LIGHTNING_CALLBACKS[name]).Callback

    def read(trainer_object: Any) -> None:
        for key, value in dict(getattr(trainer_object, "callback_metrics", {}) or {}).items():
            watch.record(str(key), value)

    class Metrics(base):
        def on_train_batch_end(self, trainer, *args, **kwargs):
            if watch.batch_due():
                read(trainer)

        def on_validation_end(self, trainer, *args, **kwargs):
            read(trainer)

        def on_train_epoch_end(self, trainer, *args, **kwargs):
            read(trainer)

    original = trainer.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            self.callbacks.append(Metrics())
        except Exception as e:  # noqa: BLE001 - no metric, but the Trainer is the user's as ever
            watch.fail(e)

    __init__._vdk_metrics = True  # type: ignore[attr-defined]  # attribute of a function object
    __init__.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
    trainer.__init__ = __init__


def start(env: Mapping[str, str] | None = None) -> MetricWatch | None:
    """The metric watch of this process when it is rank 0 of a trial (the sweep's variables set), else None; what
    it reads comes from `follow_shown`."""
    env = os.environ if env is None else env
    name, path = env.get(wire.METRIC), env.get(wire.METRIC_FILE)
    if not name or not path:
        return None
    try:
        period = float(env.get(wire.METRIC_SECONDS) or wire.DEFAULT_METRIC_SECONDS)
    except ValueError:
        period = wire.DEFAULT_METRIC_SECONDS
    return MetricWatch(name, path, period)


def shown_number(value: Any) -> float | None:
    """A value the script showed as a number: a tensor's (its item, read from the device), a number's, a printed
    text's; None when it is none (a string, a tensor of several values)."""
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None


def follow_shown(*receivers: Any) -> Shown | None:
    """From now on, what the script shows (its trainers' logs, its printed lines) goes to each of `receivers` (None
    among them: left out); None when none is left."""
    shown = Shown([r for r in receivers if r is not None])
    if not shown.receivers:
        return None
    _follow_trainers(shown)
    sys.stdout = _PrintedLines(sys.stdout, shown)
    return shown
