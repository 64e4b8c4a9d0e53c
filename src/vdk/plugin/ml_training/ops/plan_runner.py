"""A local launch plan run to its end (local/launcher.py) and its outcome diagnosed (`diagnosis/`): what every
local run of a use case goes through — `vdk run`, the smoke check before `vdk deploy`, a sweep's smoke runs
and trials. The run's start and end are told to the reporter (ops/reporting.py)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from typing import TextIO

from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.local.launcher import Starter
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.local.outcome import evidence
from vdk.plugin.ml_training.ops import resume_check
from vdk.plugin.ml_training.ops.local_result import LocalRunFailed
from vdk.plugin.ml_training.ops.local_result import LocalRunResult
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.smoke_gaps import SmokeGaps
from vdk.plugin.ml_training.ops.smoke_gaps import check_gaps
from vdk.plugin.ml_training.runtime import protocol

log = logging.getLogger(__name__)


def run_plan(
    plan: LaunchPlan,
    reporter: Reporter,
    starter: Starter | None = None,
    again: str | None = None,
    stdout: TextIO | None = None,
    check_resume: bool = True,
) -> LocalRunResult:
    """Run the plan and diagnose a failure. `starter`: where torchrun runs (default: this machine). `again`:
    what the fix ends with, after the change it asks for (default: run `vdk run JOB` again). `stdout`: where
    the ranks' output goes (default: this process's stdout). `check_resume`: a smoke run starts its ranks again
    after a stop, as a restarted pod does (ops/resume_check.py), unless the job's `smoke_resume` is off."""
    # `vdk -v DEBUG` sets the root logger's level; VDK_LOG_LEVEL_VDK=DEBUG that of "vdk.*" loggers
    debug = log.isEnabledFor(logging.DEBUG) or logging.getLogger().isEnabledFor(logging.DEBUG)
    starter = starter or HostStarter()
    starter.check()  # before the start line: nothing starts without torch
    reporter.run_starting(plan)
    resuming = check_resume and resume_check.applies(plan)
    resumed = None
    try:
        run = launch(resume_check.first_start(plan) if resuming else plan, stdout=stdout, starter=starter)
        outcome = analyse(run)
        if resuming and outcome.passed:
            resumed = resume_check.second_start(plan, outcome, reporter.note, starter, stdout)
    except KeyboardInterrupt as e:
        reporter.run_interrupted(plan, e)
        raise
    if resumed is not None and resumed.outcome is not None:
        outcome = resumed.outcome  # the second start crashed: its failure is the one to show
    gaps = SmokeGaps()
    if outcome.passed and plan.mode == protocol.SMOKE:  # what it turned off, checked as the cluster meets it
        from vdk.plugin.ml_training.image.base_facts_cache import known_provides

        default_again = f"run `vdk run{' --container' if run.engine else ''} {plan.spec.job_dir}` again"
        gaps = check_gaps(plan.spec, outcome.turned_off(), known_provides(plan.spec), again or default_again)
        if gaps.finding is not None:
            outcome = dataclasses.replace(outcome, passed=False, headline=gaps.finding.what)
    if resumed is not None and resumed.finding is not None and outcome.passed:
        outcome = dataclasses.replace(outcome, passed=False, headline=resumed.finding.what)
    finding = gaps.finding or (resumed.finding if resumed is not None else None)
    finding = finding or (None if outcome.passed else diagnose(outcome, again))
    error = None
    if finding is not None:
        error = LocalRunFailed(f"{plan.mode} run of {plan.spec.name} failed: {finding.what}", finding.fix or "")
    result = LocalRunResult(run, outcome, finding, error, debug, gaps.lines, resumed)
    reporter.run_ended(result)
    if outcome.passed and plan.mode == protocol.SMOKE and not debug:
        shutil.rmtree(run.run_dir, ignore_errors=True)  # a full run's logs stay: it may have run for hours
    return result


def diagnose(outcome: RunOutcome, again: str | None = None) -> Finding:
    """What happened to a failed run, and the fix; it ends with `again` (default: run the same `vdk run`
    again)."""
    finding = engine.why_failed(evidence(outcome, again))
    assert finding is not None  # the last rule answers every local failure
    return finding


def failure_fix(outcome: RunOutcome, again: str | None = None) -> str:
    """What to do about a failed run."""
    return diagnose(outcome, again).fix or ""
