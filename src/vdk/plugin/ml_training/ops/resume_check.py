"""The smoke run's resume check: the code that runs when a run restarts is checked before any GPU is used.

The smoke run's first start ends its cut epoch as a preemption would end it: at its planned end each rank gets
SIGTERM when it handles it (a Hugging Face Trainer, Lightning or Accelerate then saves a checkpoint at the end of
the step, runtime/resume.py; a script's own handler runs), else it stops there as SIGTERM would stop it. Then the
ranks are started again in the same working directory, as a restarted pod finds its output volume, and the second
start is watched (runtime/smoke_resume.py records what it began with):

- it resumed (a framework said so, or the parameters it first steps are those the first start had after step N,
  or its optimizer's state or its sampler's epoch went on): the check passed, `resume: checkpoint at step N ...`;
- its resume code crashed (a DDP `module.` key mismatch, a device mismatch, a missing file): the smoke run fails
  with the second start's traceback and a fix, as any other failure;
- it started over: a note of what a preempted run would lose; `smoke_resume = require` makes it a failure.

The cost: one more start of the script and its cut epoch. When the first start wrote nothing in its working
directory (a script that writes nothing cannot resume: the note says so), the second start is a plain smoke run,
for the end of training: the first start was stopped before the code after its training loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import IO

from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.local import outcome as outcomes
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.launcher import Starter
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.runtime import output_workdir
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import smoke_resume

OFF = "off"
REQUIRE = "require"
CHAPTER = "docs/resuming.md"
# Where a smoke rank's frameworks write (runtime/smoke_rank.py): in the first start's run directory, for both starts.
FRAMEWORK_DIRS = ("hf-output", "lightning")


@dataclass(frozen=True)
class ResumeCheck:
    """What the second start showed: the summary's lines; for a failure, the finding and the outcome to show (the
    second start's, when it crashed)."""

    lines: list[str] = field(default_factory=list)
    finding: Finding | None = None
    outcome: RunOutcome | None = None  # the second start's, when it failed
    run: LocalRun | None = None  # the second start's, when there was one

    @property
    def failed(self) -> bool:
        return self.finding is not None or self.outcome is not None


def applies(plan: LaunchPlan) -> bool:
    return plan.mode == protocol.SMOKE and plan.spec.smoke_resume != OFF


def first_start(plan: LaunchPlan) -> LaunchPlan:
    """The plan whose planned end is a stop, as a preemption's SIGTERM (runtime/smoke_resume.py)."""
    return dataclasses.replace(plan, env={**plan.env, protocol.SMOKE_RESUME: protocol.SMOKE_STOP})


def second_start(
    plan: LaunchPlan, first: RunOutcome, note: Callable[[str], None], starter: Starter, stdout: IO[str] | None = None
) -> ResumeCheck:
    """Start the ranks again where the first start (which passed) ran, and say whether they resumed; `note` tells
    the restart (the reporter's, ops/reporting.py: it knows this module's result, so it is not imported here)."""
    run = first.run
    # a rank that never steps (an RPC observer, a parameter server) ends its script at the agreed end: not training's
    if any(r.status == protocol.FINISHED and r.steps for r in first.ranks):
        return ResumeCheck(["resume: not checked: the first start ran the script to its end (nothing left to resume)"])
    written = files_written(run)
    if not written:
        why = "the first start wrote nothing in its working directory to resume from"
        started_over = _started_over(plan, why, first.steps)
        if started_over.failed:
            return started_over
        return _end_of_training(plan, run, started_over.lines, note, starter, stdout)
    note(
        "resume check: the ranks were stopped as a preemption stops them; starting them again in the same working "
        f"directory, which holds {_some(written)}"
    )
    env = {**plan.env, protocol.SMOKE_RESUME: protocol.SMOKE_RESTART, protocol.FIRST_START_DIR: str(run.run_dir)}
    again = dataclasses.replace(plan, env=env)
    second = launch(again, stdout=stdout, starter=starter, again=run)
    after = outcomes.analyse(second)
    if not after.passed and not after.untrained:
        return _crashed(after, second)
    if after.untrained:
        line = "resume: the second start took no optimizer step (its script ended at once)"
        return ResumeCheck([line], run=second)
    return _verdict(plan, first, smoke_resume.read_first(run.run_dir), smoke_resume.read_second(second.run_dir), after)


def files_written(run: LocalRun) -> list[str]:
    """What the first start wrote that a second start could resume from: regular files of its working directory that
    are not the job's own, and of the frameworks' directories of its run directory."""
    # the job's own files, as the working directory got them (in the job's image they are links into it: none is a
    # regular file of the outputs)
    job = set(run.work.placed) if run.work is not None else set()
    # their working directory here; in the job's image, the run directory's that its job directory was linked into
    where = run.work.path if run.work is not None else run.outputs
    out = [path for path, _, _ in output_workdir.output_files(str(where)) if path not in job] if where else []
    for name in FRAMEWORK_DIRS:
        directory = run.run_dir / name
        if directory.is_dir():
            out += [f"{name}/{path}" for path, _, _ in output_workdir.output_files(str(directory))]
    return out


def _verdict(plan: LaunchPlan, first: RunOutcome, before: dict, after: dict, second: RunOutcome) -> ResumeCheck:
    saved = before.get("on_stop") if isinstance(before.get("on_stop"), dict) else None
    framework = after.get("framework") if isinstance(after.get("framework"), dict) else None
    step = resumed_step(before, after)
    if step is None and framework is not None:
        step = int(framework.get("step") or 0)
    took = f"a second start of {second.run.wall_seconds:.1f} s"
    if step:
        written = "written by the script"
        if saved:
            written = f"written on stop ({saved['checkpoint']})" if saved.get("checkpoint") else "written on stop"
        lines = [f"resume: checkpoint at step {step} {written}, resumed at step {step} ({took})"]
        return ResumeCheck(lines + _second_epoch(second), run=second.run)
    epoch = after.get("epoch")
    if isinstance(epoch, int) and epoch > 0:
        lines = [f"resume: the second start went on at epoch {epoch}, its sampler's ({took})"]
        return ResumeCheck(lines + _second_epoch(second), run=second.run)
    why = "the second start, in the same working directory, started over (it resumed from nothing the first one wrote)"
    return dataclasses.replace(_started_over(plan, why, first.steps), run=second.run)


def _second_epoch(second: RunOutcome) -> list[str]:
    """What the second start's cut epoch ran (the first start's may have been cut short by the stop), and whether it
    then ran the code after its training loop (the first start was stopped before it)."""
    end = second.epoch_end
    lines = []
    if end is not None and end.reached and end.then:
        lines.append(f"resume: the second start's epoch: reached its end, then {', '.join(end.then)}")
    return lines + _training_lines(second, "the second start's end of training")


def _training_lines(start: RunOutcome, label: str) -> list[str]:
    training = start.training_end
    if training is None:
        return []
    if training.reached:
        return [
            f"{label}: {training.how or 'reached'}" + (f", then {', '.join(training.then)}" if training.then else "")
        ]
    if training.not_run:
        return [f"{label}: the code after the training loop did not run: {training.not_run}"]
    return []


def _end_of_training(
    plan: LaunchPlan,
    run: LocalRun,
    lines: list[str],
    note: Callable[[str], None],
    starter: Starter,
    stdout: IO[str] | None,
) -> ResumeCheck:
    """The first start was stopped as a preemption stops it, before the code after its training loop, and wrote
    nothing to resume from: the ranks start again, in the same working directory, as a plain smoke run, whose end is
    the end of training (the code after the loop runs: runtime/epochs.py)."""
    note("end of training: the first start was stopped as a preemption stops it; starting the ranks again to run it")
    again = launch(plan, stdout=stdout, starter=starter, again=run)
    after = outcomes.analyse(again)
    if not after.passed:
        headline = f"the start that ran the end of training, {after.headline}"
        return ResumeCheck(lines, outcome=dataclasses.replace(after, headline=headline), run=again)
    return ResumeCheck(lines + _training_lines(after, "end of training"), run=again)


def resumed_step(before: dict, after: dict) -> int | None:
    """The step of the first start whose parameters the second start first stepped (None: none of them; 0: those it
    began with), else the step count of the optimizer state it restored."""
    first_step = after.get("first_step")
    if not isinstance(first_step, dict):
        first_step = {}
    prints = (before.get("fingerprints") or {}).get("0") or []
    seen = first_step.get("fingerprint")
    if seen and seen in prints:
        return max(i for i, p in enumerate(prints) if p == seen)
    restored = first_step.get("optimizer_step")
    return int(restored) if isinstance(restored, int) and restored > 0 else None


def _started_over(plan: LaunchPlan, why: str, steps: int | None = None) -> ResumeCheck:
    lost = (
        f"a run preempted after {steps} step{'s' if steps != 1 else ''} would lose them all"
        if steps
        else ("a preempted run would lose every step it took")
    )
    what = f"{why}: {lost} and start over"
    how = (
        "resume from a checkpoint in the working directory (a Hugging Face Trainer, Lightning and Accelerate do it "
        f"with `resume = auto`, the default; a plain loop loads its own snapshot when it finds one: {CHAPTER})"
    )
    if plan.spec.smoke_resume == REQUIRE:
        fix = f"{how}; or set `smoke_resume = check` in [ml-training] to be told only"
        return ResumeCheck([f"resume: {what}"], Finding(FAILED, f"{what} (smoke_resume = require)", fix))
    return ResumeCheck([f"note: resume: {what}. To fix: {how}; `smoke_resume = off` skips this check"])


def _crashed(after: RunOutcome, second: LocalRun) -> ResumeCheck:
    """The resume code crashed: the second start's failure, diagnosed as any other (ops/local_run.py), headed as the
    restart's."""
    headline = f"the second start, resuming from what the first start wrote (as a restarted pod does), {after.headline}"
    where = "in the code that runs when a run resumes"
    if after.training_end is not None and after.training_end.reached:
        where = "after its training loop, in the code that runs at the end of training"
    line = (
        "resume: the first start passed and was stopped as a preemption stops it; the second start, in the same "
        f"working directory, failed {where}"
    )
    return ResumeCheck([line], outcome=dataclasses.replace(after, headline=headline), run=second)


def _some(paths: list[str]) -> str:
    shown = ", ".join(sorted(paths, key=lambda p: (p.count("/"), p))[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
