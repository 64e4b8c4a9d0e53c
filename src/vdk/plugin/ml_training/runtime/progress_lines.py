"""Progress lines printed by rank 0 of a cluster or full local run, for people reading its log and for
`vdk show` and a full run's summary (`parse_progress`, below, reads them back):

    [vdk-ml-training] progress step=120/1000 loss=0.43121 steps_per_s=2.35 elapsed=51s eta=6m14s

on the first optimizer step, then at the first step at least `period` seconds after the last line,
and once more when the script ends (with `script=finished` or `script=failed` and `after_last_step`,
how long the script ran after its last optimizer step; no ETA). That last line is also left as the
container's termination message (runtime/termination.py), where `vdk list --usage` reads it. The
reporter's followers get each line's figures too (runtime/kubeflow_status.py posts them to Kubeflow).

Standard library only (the step counter is handed in): the readers import this module too.
Between two lines a step costs one clock read; the loss is read from the device only for a line.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any
from typing import Protocol
from typing import TextIO

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.vocabulary import wire

MARK = wire.mark(wire.PROGRESS)
DEFAULT_PERIOD_SECONDS = 30.0


def approximate_duration(seconds: float) -> str:
    """3725 -> "1h2m", 95 -> "1m35s", 725 -> "12m": two units at most, for people."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if minutes < 10 and secs else f"{minutes}m"
    return f"{secs}s"


def format_line(
    step: int,
    total: int | None = None,
    loss: float | None = None,
    steps_per_s: float | None = None,
    elapsed_s: float | None = None,
    eta_s: float | None = None,
    script: str | None = None,
    after_last_step_s: float | None = None,
    resumed: str | None = None,
) -> str:
    """One progress line; values never contain spaces, so `key=value` tokens split on whitespace. `resumed`: the
    checkpoint this process resumed from and its step (`checkpoint-1200@1200`, runtime/resume.py)."""
    parts = [MARK, f"step={step}/{total}" if total else f"step={step}"]
    if loss is not None:
        parts.append(f"loss={loss:.6g}")
    if steps_per_s is not None:
        parts.append(f"steps_per_s={steps_per_s:.0f}" if steps_per_s >= 1000 else f"steps_per_s={steps_per_s:.3g}")
    if elapsed_s is not None:
        parts.append(f"elapsed={approximate_duration(elapsed_s)}")
    if eta_s is not None:
        parts.append(f"eta={approximate_duration(eta_s)}")
    if script:
        parts.append(f"script={script}")
    if after_last_step_s is not None:
        parts.append(f"after_last_step={approximate_duration(after_last_step_s)}")
    if resumed:
        parts.append(f"resumed={resumed.replace(' ', '_')}")
    return " ".join(parts)


@dataclass(frozen=True)
class Figures:
    """What one progress line says, as numbers: what the reporter's followers get."""

    step: int
    total: int | None = None
    loss: float | None = None
    steps_per_s: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    script: str | None = None  # the last line's: how the script ended (finished, failed)
    after_last_step_s: float | None = None
    resumed: str | None = None  # `checkpoint-1200@1200`: the checkpoint a framework resumed from (runtime/resume.py)

    def line(self) -> str:
        return format_line(**asdict(self))


class Follower(Protocol):
    """Takes the figures of each progress line (`offer`, on the training thread: it must return at once and
    never raise) and is told when the script ended (`close`, after the last line's figures)."""

    def offer(self, figures: Figures) -> None: ...

    def close(self) -> None: ...


_reporters: list = []  # weak references to this process's reporters, told when a framework resumes


def note_resumed(checkpoint: str, step: int) -> None:
    """A framework resumed from `checkpoint` at `step`: every line from now on says so, and counts steps from there
    (unless a Trainer already told the reporter its steps done)."""
    for ref in list(_reporters):
        reporter = ref()
        if reporter is not None:
            reporter.resumed_from(checkpoint, step)


class ProgressSettings:
    """`VDK_ML_TRAINING_PROGRESS_SECONDS` (0 = off) and `VDK_ML_TRAINING_TOTAL_STEPS` of the environment;
    a value that does not parse is a problem, ignored with a warning (the job config refuses it earlier)."""

    def __init__(self, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.problems: list[str] = []
        self.period = self._number(env, protocol.PROGRESS_SECONDS, DEFAULT_PERIOD_SECONDS, float, 0)
        self.total_steps = self._number(env, protocol.TOTAL_STEPS, None, int, 1)

    def _number(self, env, name: str, default, kind: Callable, minimum):
        text = env.get(name, "").strip()
        if not text:
            return default
        try:
            value = kind(text)
            if not (value >= minimum and math.isfinite(value)):
                raise ValueError
        except ValueError:
            self.problems.append(f"{name}={text!r} is not a number >= {minimum}")
            return default
        return value


class ProgressReporter:
    """Prints progress lines of a `StepCounter` (a listener of its optimizer steps) to `out`.

    Made before the user's code runs; `attach` gives it the counter once the code imported torch.
    Any error in here turns reporting off with one warning line on stderr: the training goes on.
    """

    def __init__(
        self,
        period: float = DEFAULT_PERIOD_SECONDS,
        total_steps: int | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.counter: Any = None
        self.period = period
        self.total_steps = total_steps
        self.last_line: str | None = None
        self._out = out or sys.stdout  # the stream of the start: a script's redirect_stdout() does not take it
        self._clock = clock
        self._started = clock()
        self._due = 0.0  # the first step is reported at once
        self._first: tuple[float, int] | None = None  # (time, counter steps) of the first report
        self._offset = 0  # shown step = counter steps + offset (a Trainer resumed at global_step N)
        self._last_step_at: float | None = None  # the clock at the last optimizer step
        self._on = True
        self.followers: list[Follower] = []  # given each line's figures (runtime/kubeflow_status.py)
        self._resumed: str | None = None  # `checkpoint-1200@1200` once a framework resumed (runtime/resume.py)
        import weakref

        _reporters.append(weakref.ref(self))

    def resumed_from(self, checkpoint: str, step: int) -> None:
        self._resumed = f"{checkpoint}@{step}"
        if not self._offset:
            self._offset = int(step) - (self.counter.steps if self.counter is not None else 0)

    def attach(self, counter: Any) -> ProgressReporter:
        if not self._on or self.counter is not None:
            return self
        self.counter = counter
        counter.listeners.append(self._after_step)
        if hasattr(os, "register_at_fork"):  # a forked child (DataLoader worker) reports nothing
            os.register_at_fork(after_in_child=self._turn_off)
        return self

    def set_total(self, total_steps: int, done: int = 0) -> None:
        """A trainer knows the run's length: `total_steps`, of which `done` before its first step here."""
        if total_steps and total_steps > 0:
            self.total_steps = int(total_steps)
            self._offset = int(done) - (self.counter.steps if self.counter is not None else 0)

    def _after_step(self, counter, optimizer) -> None:
        now = self._last_step_at = self._clock()
        if now < self._due:
            return
        try:
            self._report(now)
            self._due = now + self.period
        except Exception as e:  # noqa: BLE001 - reporting must never break training
            self.fail(e)

    def finish(self, script: str) -> None:
        """The last line, when the script ended (`finished`) or raised (`failed`); none without a step.
        Then the followers are closed (each returns within its own bound)."""
        if self._on and self.counter is not None and self.counter.steps:
            try:
                self._report(self._clock(), script=script)
                termination.leave(self.last_line or "")
            except Exception as e:  # noqa: BLE001 - reporting must never break training
                self.fail(e)
        self._turn_off()
        for follower in self.followers:
            follower.close()

    def _report(self, now: float, script: str | None = None) -> None:
        steps = self.counter.steps
        if self._first is None:
            self._first = (now, steps)
        first_time, first_steps = self._first
        rate = (steps - first_steps) / (now - first_time) if steps > first_steps and now > first_time else None
        step = steps + self._offset
        eta = after = None
        if rate and self.total_steps and script is None:
            eta = max(0, self.total_steps - step) / rate
        if script is not None and self._last_step_at is not None:
            after = max(0.0, now - self._last_step_at)
        loss, elapsed = self.counter.loss(), now - self._started
        figures = Figures(step, self.total_steps, loss, rate, elapsed, eta, script, after, self._resumed)
        self.last_line = figures.line()
        self._out.write(self.last_line + "\n")
        self._out.flush()
        for follower in self.followers:
            follower.offer(figures)

    def fail(self, error: Exception) -> None:
        self._turn_off()
        try:
            sys.stderr.write(
                wire.warning(
                    f"progress lines are off for the rest of this run after an error in them "
                    f"({type(error).__name__}: {error}); training goes on"
                )
                + "\n"
            )
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - stderr is gone too: nothing left to tell
            pass

    def _turn_off(self) -> None:
        self._on = False
        try:
            self.counter.listeners.remove(self._after_step)
        except (AttributeError, ValueError):
            pass


def start(settings: ProgressSettings | None = None) -> ProgressReporter | None:
    """A reporter for this process, unless the period is 0; it follows HF Trainers for the total.
    The caller attaches it to the step counter."""
    settings = settings or ProgressSettings()
    for problem in settings.problems:
        sys.stderr.write(wire.warning(f"{problem}: ignored") + "\n")
    if not settings.period:
        return None
    reporter = ProgressReporter(settings.period, settings.total_steps)
    from vdk.plugin.ml_training.runtime import hf_progress

    hf_progress.follow_trainers(reporter)
    return reporter


# --- reading them back -------------------------------------------------------------------------------


LOG = "log"  # Progress.source: rank 0's last progress line
KUBEFLOW = "kubeflow"  # Progress.source: the TrainJob's status.trainerStatus (runtime/kubeflow_status.py)


@dataclass(frozen=True)
class Progress:
    """What the training process last reported: in a progress line, or in the TrainJob's Kubeflow status."""

    step: int | None
    total_steps: int | None
    loss: float | None
    eta: str | None
    fields: dict
    line: str
    percent: int | None = None  # how complete, 0-100 (the Kubeflow status says it)
    source: str = LOG
    updated: str | None = None  # when the Kubeflow status was written (RFC 3339)

    def describe(self) -> str:
        parts = []
        if self.step is not None:
            parts.append(f"step {self.step}" + (f"/{self.total_steps}" if self.total_steps else ""))
        if self.percent is not None:
            parts.append(f"{self.percent}%")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.eta:
            parts.append(f"ETA {self.eta}")
        if self.fields.get("steps_per_s"):
            parts.append(f"{self.fields['steps_per_s']} steps/s")
        known = {"step", "total_steps", "max_steps", "total", "loss", "eta", "eta_s", "eta_seconds", "steps_per_s"}
        names = {"after_last_step": "after the last step", "gpu_utilisation": "GPU utilisation"}
        parts += [f"{names.get(k, k)} {v}" for k, v in self.fields.items() if k not in known | {"resumed"}]
        if self.fields.get("resumed"):
            checkpoint, _, step = self.fields["resumed"].rpartition("@")
            parts.append(f"resumed from {checkpoint} (step {step})" if checkpoint else f"resumed from {step}")
        if self.source == KUBEFLOW:
            parts.append("from the TrainJob's Kubeflow status" + (f" of {self.updated}" if self.updated else ""))
        return ", ".join(parts) or self.line

    def brief(self) -> str:
        """A few words for a table cell: "42% ETA 6m14s", "step 120/1000"."""
        if self.percent is not None:
            done = f"{self.percent}%"
        elif self.step is not None:
            done = f"step {self.step}" + (f"/{self.total_steps}" if self.total_steps else "")
        else:
            done = "-"
        return done + (f" ETA {self.eta}" if self.eta else "")

    @property
    def after_last_step_seconds(self) -> float | None:
        """How long the script ran after its last optimizer step (its last line says), in seconds."""
        text = self.fields.get("after_last_step")
        return duration_seconds(text) if text else None

    def to_dict(self) -> dict:
        return asdict(self)


def duration_seconds(text: str) -> float:
    """'1h2m' -> 3720.0: the inverse of approximate_duration (a bare number is seconds)."""
    try:
        return float(text)
    except ValueError:
        pass
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([dhms])", text)))


def loss_curve(lines: Iterable[str]) -> list[tuple[int, float]]:
    """(step, loss) of every progress line in `lines` that has both, in order; a NaN loss stays NaN."""
    points = []
    for line in lines:
        fields = wire.fields(line, wire.PROGRESS)
        if fields is None:
            continue
        step, loss = as_int(fields.get("step", "").partition("/")[0]), as_float(fields.get("loss"))
        if step is not None and loss is not None:
            points.append((step, loss))
    return points


def parse_progress(lines: Iterable[str]) -> Progress | None:
    """The last progress line the training process printed, e.g.
    `[vdk-ml-training] progress step=120 total_steps=1000 loss=0.4312 eta=35m`
    (`step=120/1000` works too; unknown keys are kept)."""
    for line in reversed(list(lines)):
        fields = wire.fields(line, wire.PROGRESS)
        if fields is None:
            continue
        at = line.find(MARK + " ")
        step, _, total = fields.get("step", "").partition("/")
        total = total or fields.get("total_steps") or fields.get("max_steps") or fields.get("total") or ""
        eta = fields.get("eta")
        seconds = as_float(
            fields.get("eta_s")
            or fields.get("eta_seconds")
            or (eta if eta and eta.replace(".", "", 1).isdigit() else None)
        )
        return Progress(
            step=as_int(step),
            total_steps=as_int(total),
            loss=as_float(fields.get("loss")),
            eta=approximate_duration(seconds) if seconds is not None else eta,
            fields=fields,
            line=line[at:].strip(),
        )
    return None


def as_int(value: Any) -> int | None:
    """A progress figure as a whole number (`'120'`, `120`), None when it is none (missing, `'1.5'`, `'n/a'`,
    a JSON true): how every reader of progress (these lines, a Kubeflow status) takes its numbers."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def as_float(value: Any) -> float | None:
    """A progress figure as a number (`'0.43'`, `'nan'` stays NaN), None when it is none."""
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return None
