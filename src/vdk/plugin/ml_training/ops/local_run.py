"""The local run of a job as a use case: `vdk run` (the smoke run, a full run, either in the job's image) and
the smoke check before `vdk deploy`. Which run the flags and settings ask for, the import check before it,
the run itself, and its outcome with the diagnosis of a failure (`diagnosis/`).

What the user reads as the run goes is the watcher's (`RunWatcher`; cli/local_summary.py prints it): the
start line is shown before a run that may take hours, the summary when it ends."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol
from typing import TextIO

from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.job.settings import CONTAINER_MODE
from vdk.plugin.ml_training.job.settings import RUN_MODE
from vdk.plugin.ml_training.job.settings import RUN_MODES
from vdk.plugin.ml_training.job.settings import setting
from vdk.plugin.ml_training.local import overlay
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.launcher import Starter
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.outcome import RunOutcome
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.local.outcome import evidence
from vdk.plugin.ml_training.local.overlay import Overlay
from vdk.plugin.ml_training.ops.imports import check_job_imports
from vdk.plugin.ml_training.ops.smoke_gaps import SmokeGaps
from vdk.plugin.ml_training.ops.smoke_gaps import check_gaps
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.source.job_files import FileSet

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.build_progress import Progress

log = logging.getLogger(__name__)


class LocalRunFailed(MLTrainingError):
    """A local run of an ml-training job did not pass; the summary above it says why."""


@dataclass(frozen=True)
class LocalRunResult:
    """A local run that ended: its outcome, and for a failure the finding (what happened, the fix) and the
    error to report."""

    run: LocalRun
    outcome: RunOutcome
    finding: Finding | None  # None: it passed
    error: LocalRunFailed | None
    debug: bool  # `vdk -v DEBUG`: torchrun's log is shown and the run's files are kept
    # A smoke run: what it turned off that the cluster run will do, and how that was checked (ops/smoke_gaps.py)
    turned_off: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.outcome.passed


class RunWatcher(Protocol):
    """What a local run tells as it goes."""

    def note(self, text: str) -> None:
        """Something to know before the run (an import the base image may or may not provide)."""

    def starting(self, plan: LaunchPlan) -> None:
        """The run is about to start (the plan says which run, where, for how long)."""

    def interrupted(self, plan: LaunchPlan, error: KeyboardInterrupt) -> None:
        """`vdk` was asked to stop (Ctrl-C, SIGTERM, SIGHUP): every process of the run was stopped."""

    def ended(self, result: LocalRunResult) -> None:
        """The run ended, passed or not."""


class QuietWatcher:
    """A watcher that shows nothing (a notebook or CI step reads the returned `LocalRunResult`)."""

    def note(self, text: str) -> None:
        pass

    def starting(self, plan: LaunchPlan) -> None:
        pass

    def interrupted(self, plan: LaunchPlan, error: KeyboardInterrupt) -> None:
        pass

    def ended(self, result: LocalRunResult) -> None:
        pass


def run_mode(
    configuration: Any, job_dir: Path | None = None, full: bool = False, container: bool = False
) -> tuple[str, bool]:
    """(smoke or full, whether in the job's image) from the flags (`full`, `container`), else
    ml_training_run_mode (the environment, else [vdk] of the job's config.ini)."""
    mode = str(setting(configuration, RUN_MODE, job_dir)[0] or protocol.SMOKE).strip().lower()
    if mode not in RUN_MODES:
        raise MLTrainingError(
            f"{variable('run_mode')} ({RUN_MODE}) is {mode!r}, which is not one of {', '.join(RUN_MODES)}",
            "set it to `smoke` (a few steps on CPU, the default), `full` or `container` (the smoke run in the job's "
            "image), or pass `vdk run --full` / `--container`",
        )
    in_container = container or mode == CONTAINER_MODE
    full = full or mode == protocol.FULL
    return (protocol.FULL if full else protocol.SMOKE), in_container


@checked
def run_job(
    spec: MLJobSpec,
    configuration: Any = None,
    watcher: RunWatcher | None = None,
    full: bool = False,
    container: bool = False,
    check_imports: bool = True,
    data_progress: Progress | None = None,
) -> LocalRunResult:
    """`vdk run JOB`: the run the flags (`full`, `container`) or the settings in `configuration` ask for (None:
    the environment's, then [vdk] of the job's config.ini), after the import check (unless `check_imports` is
    False), shown to `watcher` as it goes (None: nothing shown; the result says everything). The datasets of
    [ml-training.data] are sampled for a smoke run and fetched whole for a full one (`data_progress` shows it)."""
    watcher = watcher or QuietWatcher()
    mode, in_container = run_mode(configuration, spec.job_dir, full, container)
    if spec.overrides:
        from vdk.plugin.ml_training.job.overrides import describe

        watcher.note(f"for this run, over config.ini: {describe(spec.overrides)}")
    base_unknown = False
    if check_imports:
        notes = check_imports_locally(spec)
        base_unknown = bool(notes)  # what the base provides is not known: checked again once it is read
        for note in notes:
            watcher.note(note)
    if in_container:
        from vdk.plugin.ml_training.ops import container_run

        engine = container_run.engine_from(configuration, spec.job_dir)
        plan, starter = container_run.prepare(spec, mode, engine, recheck_imports=base_unknown)
        return run_plan(with_data(plan, data_progress), watcher, starter=starter)
    deps = _overlay(spec, watcher)  # the image has its dependency layer; here, the overlay
    plan = smoke_plan(spec, overlay=deps) if mode == protocol.SMOKE else full_plan(spec, overlay=deps)
    return run_plan(with_data(plan, data_progress), watcher)


def with_data(plan: LaunchPlan, progress: Progress | None = None) -> LaunchPlan:
    """The plan with the job's datasets of [ml-training.data] on this machine (ops/data_samples.py): a sample for
    a smoke run, each whole for a full run (`progress` shows the fetch)."""
    if not plan.spec.data:
        return plan
    from vdk.plugin.ml_training.ops.data_samples import local_datasets

    datasets, notes = local_datasets(plan.spec, plan.mode, progress)
    return dataclasses.replace(plan, data=datasets, notes=(*plan.notes, *notes))


def smoke_check(
    spec: MLJobSpec, again: str, watcher: RunWatcher, files: FileSet | None = None
) -> LocalRunFailed | None:
    """The smoke run before a deploy: its output on stderr (the deploy's stdout is its result), the error to
    report if it failed, with a fix that ends with `again`. `files`: the job directory's files as the deploy
    found them (its working directory holds them; the image's code layer will). (A sweep's is
    ops/sweep_smoke.py's.)"""
    deps = _overlay(spec, watcher)
    plan = smoke_plan(spec, overlay=deps, files=files)
    return run_plan(with_data(plan), watcher, again=again, stdout=sys.stderr).error


def _overlay(spec: MLJobSpec, watcher: RunWatcher) -> Overlay | None:
    """The job's dependency overlay (local/overlay.py); while uv installs it, its steps as the run's notes and, when
    it is quiet (one long download), `still working, N s so far` every 10 s."""
    from vdk.plugin.ml_training.image.build_progress import LineProgress

    activity = LineProgress(watcher.note, prefix="  ").activity("dependency overlay")
    try:
        return overlay.prepare(spec, watcher.note, activity)
    finally:
        activity.close()


def check_imports_locally(spec: MLJobSpec) -> list[str]:
    """The import check with what is known of the base image without contacting its registry: raises
    ImportCheckFailed, returns notes about imports the base image may provide."""
    from vdk.plugin.ml_training.image.base_facts_cache import known_provides

    return check_job_imports(spec, known_provides(spec))


def run_plan(
    plan: LaunchPlan,
    watcher: RunWatcher,
    starter: Starter | None = None,
    again: str | None = None,
    stdout: TextIO | None = None,
) -> LocalRunResult:
    """Run the plan and diagnose a failure. `starter`: where torchrun runs (default: this machine). `again`:
    what the fix ends with, after the change it asks for (default: run `vdk run JOB` again). `stdout`: where
    the ranks' output goes (default: this process's stdout)."""
    # `vdk -v DEBUG` sets the root logger's level; VDK_LOG_LEVEL_VDK=DEBUG that of "vdk.*" loggers
    debug = log.isEnabledFor(logging.DEBUG) or logging.getLogger().isEnabledFor(logging.DEBUG)
    starter = starter or HostStarter()
    starter.check()  # before the start line: nothing starts without torch
    watcher.starting(plan)
    try:
        run = launch(plan, stdout=stdout, starter=starter)
    except KeyboardInterrupt as e:
        watcher.interrupted(plan, e)
        raise
    outcome = analyse(run)
    gaps = SmokeGaps()
    if outcome.passed and plan.mode == protocol.SMOKE:  # what it turned off, checked as the cluster meets it
        from vdk.plugin.ml_training.image.base_facts_cache import known_provides

        default_again = f"run `vdk run{' --container' if run.engine else ''} {plan.spec.job_dir}` again"
        gaps = check_gaps(plan.spec, outcome.turned_off(), known_provides(plan.spec), again or default_again)
        if gaps.finding is not None:
            outcome = dataclasses.replace(outcome, passed=False, headline=gaps.finding.what)
    finding = gaps.finding or (None if outcome.passed else diagnose(outcome, again))
    error = None
    if finding is not None:
        error = LocalRunFailed(f"{plan.mode} run of {plan.spec.name} failed: {finding.what}", finding.fix or "")
    result = LocalRunResult(run, outcome, finding, error, debug, gaps.lines)
    watcher.ended(result)
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
