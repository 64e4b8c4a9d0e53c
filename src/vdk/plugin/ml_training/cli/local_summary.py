"""What the user reads of a local run (`vdk run`, the smoke check before `vdk deploy`): the start line, the
summary when it ends (every rank, and for a failure the traceback, where a stalled or dead rank was, the
note beside the error), torchrun's log under `vdk -v DEBUG`. It renders what ops/local_run.py returns (the
command line's reporter, cli/console.py, shows it); it decides nothing."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.cli.text_table import shown
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.outcome import LAUNCHER_RANK
from vdk.plugin.ml_training.local.outcome import MISSING
from vdk.plugin.ml_training.local.outcome import RankOutcome
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.local.outcome import one_line
from vdk.plugin.ml_training.local.stack_dump import user_stack
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress
from vdk.plugin.ml_training.runtime.watchdog import STALL_EXIT_CODE
from vdk.plugin.ml_training.units import format_duration
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.human_units import size_text


def format_start(plan: LaunchPlan) -> str:
    spec = plan.spec
    limit = f", timeout {format_duration(plan.timeout_seconds)}" if plan.timeout_seconds else ""
    if plan.mode == protocol.SMOKE:
        steps = f"{spec.smoke_steps} optimizer step{'s' if spec.smoke_steps != 1 else ''}"
        virtual = int(plan.env.get(protocol.SMOKE_GPUS) or 0)
        gpus = counted(virtual, "virtual GPU") if virtual else "no GPU"
        processes = (  # how many workers it spawns is the script's to say: the summary counts them
            f"1 launcher process that spawns its workers, on {gpus}"
            if plan.workers
            else f"{counted(plan.processes, 'process')} on {gpus}"
        )
        text = (
            f"ml-training smoke run of {spec.name}: {spec.entrypoint} on CPU, {processes}, "
            f"{steps}{' each' if plan.ranks > 1 else ''}{limit}"
        )
    else:
        text = f"ml-training full run of {spec.name}: {spec.entrypoint}, {counted(plan.processes, 'process')}{limit}"
    return "\n".join([text, *(f"  {d.line()}" for d in plan.data), *(f"  note: {n}" for n in plan.notes)])


@shown
def format_summary(outcome: RunOutcome, finding: Finding | None = None) -> str:
    """The summary of a run that ended; `finding`: the diagnosis of a failure (its hints are noted beside the
    traceback)."""
    run = outcome.run
    mode = run.plan.mode
    lines = [""]
    if outcome.passed:
        lines.append(f"{mode} run PASSED in {run.wall_seconds:.1f} s ({counted(len(outcome.ranks), 'process')})")
        lines += [f"  {_rank_line(r, mode)}" for r in outcome.ranks]
        adapted = outcome.adaptations()
        if outcome.launcher is not None:
            lines.append(f"  {_rank_line(outcome.launcher, mode)}")
        lines += _epoch_lines(outcome)
        if adapted:
            lines.append(f"  adapted for CPU: {', '.join(adapted)}")
        lines += [f"  {d.line()}" for d in run.plan.data]
        lines += [f"  warning: {w}" for w in outcome.warnings]
        if mode == protocol.FULL:
            lines += _progress_lines(outcome)
            lines += _log_lines(outcome)
            lines += _work_dir_lines(outcome)
        return "\n".join(lines)

    lines.append(f"{mode} run FAILED after {run.wall_seconds:.1f} s: {outcome.headline}")
    root = outcome.root_cause
    if root is not None and root.error:
        lines += ["", root.error.get("traceback", "").rstrip()]
        for hint in finding.hints if finding is not None else []:
            lines += ["", f"note: {hint}"]
    elif root is not None and root.stall is not None:
        lines += _stall_details(root, outcome)
    elif root is not None:
        lines += _death_details(root, run.plan.spec.job_dir)
    elif all(r.status == MISSING for r in outcome.ranks) and not run.timed_out:
        tail = _tail(run.agent_log, 20)
        whose = f"{run.engine}'s and torchrun's log" if run.engine else "torchrun's log"
        lines += ["", f"last lines of {whose} ({run.agent_log}):", *(f"  {t}" for t in tail)]
    if run.timed_out:
        for rank in outcome.ranks:
            if not rank.succeeded:
                lines += _where(rank, run.plan.spec.job_dir)
    lines.append("")
    for other in outcome.consequences:
        what = one_line(other.error, width=120) if other.error else other.death()
        lines.append(f"  then {other.label}: {what}")
    lines += [f"  {_rank_line(r, mode)}" for r in outcome.ranks]
    if outcome.launcher is not None:
        lines.append(f"  {_rank_line(outcome.launcher, mode)}")
    lines += _epoch_lines(outcome, failed=True)
    lines += _progress_lines(outcome)
    lines += _log_lines(outcome)
    if mode == protocol.FULL:
        lines += _work_dir_lines(outcome)
    lines.append(f"  torchrun's log: {run.agent_log}")
    return "\n".join(lines)


def format_agent_log(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").rstrip()
    except OSError:
        text = ""
    return f"--- torchrun's log ({path}) ---\n{text or '(empty)'}\n---"


def _epoch_lines(outcome: RunOutcome, failed: bool = False) -> list[str]:
    """Smoke runs: whether the end of an epoch ran, and what ran after it (a failure: only if it was reached)."""
    end = outcome.epoch_end if outcome.run.plan.mode == protocol.SMOKE else None
    if end is None:
        return []
    if end.reached:
        text = "reached" + (f" ({end.how})" if end.how else "")
        if end.then:
            text += f", then {', '.join(end.then)}"
        return [f"  end of epoch: {text}", *_training_lines(outcome)]
    return [f"  end of epoch: not reached ({end.why_not})"] if end.why_not and not failed else []


def _training_lines(outcome: RunOutcome) -> list[str]:
    """Smoke runs past the end of an epoch: whether the code after the training loop ran, and what ran there (a save
    that raised is not among it), or what did not run and what covers it."""
    end = outcome.training_end
    if end is None:
        return []
    lines = []
    if end.reached:
        text = end.how or "reached"
        lines.append(f"  end of training: {text}" + (f", then {', '.join(end.then)}" if end.then else ""))
    elif end.not_run:
        lines.append(f"  end of training: the code after the training loop did not run: {end.not_run}")
    if end.note:
        lines.append(f"  note: {end.note}")
    return lines


def _work_dir_lines(outcome: RunOutcome) -> list[str]:
    work = outcome.run.work
    if work is None:
        return []
    return [f"  working directory: {work.path} (what the run wrote is there; the job directory is unchanged)"]


def _progress_lines(outcome: RunOutcome) -> list[str]:
    """A full run's last progress line, read back as `vdk show` reads a cluster run's."""
    reported = [parse_progress([r.progress]) for r in outcome.ranks if r.progress]
    return [f"  last progress: {p.describe()}" for p in reported if p is not None]


def _log_lines(outcome: RunOutcome) -> list[str]:
    logs = [f"rank {r.rank}: {r.log}" for r in outcome.ranks if r.log]
    return [f"  output of ranks: {', '.join(logs)}"] if logs else []


def _rank_line(rank: RankOutcome, mode: str) -> str:
    facts = []
    if rank.spawned:  # the launcher: the workers the script spawned, as it spawned them
        calls = f" in {len(rank.spawned)} calls" if len(rank.spawned) > 1 else ""
        facts.append(f"spawned {counted(sum(rank.spawned), 'worker')}{calls}")
    if rank.steps is not None and (rank.steps or rank.rank != LAUNCHER_RANK):
        facts.append(counted(rank.steps, "step"))
    if isinstance(rank.last_loss, (int, float)):
        facts.append(f"last loss {rank.last_loss:.4g}")
    elif rank.last_loss:
        facts.append(f"last loss {rank.last_loss}")
    if rank.died_abruptly:
        status = rank.death()
        if rank.peak_memory:
            facts.append(f"peak memory {size_text(rank.peak_memory)}")
    else:
        status = {
            protocol.STOPPED: "stopped as planned" if mode == protocol.SMOKE else "stopped",
            protocol.FINISHED: "the script ended",
            protocol.FAILED: "failed",
            protocol.STALLED: "stalled",
            protocol.RUNNING: "stopped unfinished",
        }.get(rank.status, "never started")
        if rank.crashed_at_exit:
            status += f", then {rank.death()} while Python shut down"
    return f"{rank.label}: {', '.join(facts + [status])}"


def _death_details(rank: RankOutcome, job_dir: Path) -> list[str]:
    lines = []
    stack = user_stack(rank.stack, job_dir)
    if stack:
        lines += ["", f"Python stack of {rank.label} when it died:", *stack]
    if rank.log:
        tail = _tail(rank.log, 15)
        if tail:
            lines += ["", f"last output of {rank.label} ({rank.log}):", *(f"  {t}" for t in tail)]
    return lines


def _stall_details(root: RankOutcome, outcome: RunOutcome) -> list[str]:
    """Where the stalled rank's threads were (innermost frame first), and where the others were stopped."""
    stall = root.stall or {}
    lines = ["", f"{root.label} exited with code {STALL_EXIT_CODE} (the stall watchdog); where it was:"]
    for thread in stall.get("threads") or []:
        frames = thread.get("frames") or []
        lines += [f"  thread {thread.get('name')} (most recent call first):", *(f"  {f}" for f in frames[:16])]
    for other in outcome.ranks:  # the ranks torchrun stopped: where they waited
        if other is not root and other.status == protocol.RUNNING:
            lines += _where(other, outcome.run.plan.spec.job_dir)
    return lines


def _where(rank: RankOutcome, job_dir: Path) -> list[str]:
    stack = user_stack(rank.stack, job_dir)
    if not stack:
        return [f"{rank.label}: no stack recorded"]
    return ["", f"{rank.label} was at:", *stack]


def _tail(path: Path, lines: int) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()[-lines:]
    except OSError:
        return []
