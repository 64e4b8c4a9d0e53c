"""The local run of a job as a use case: `vdk run` (the smoke run, a full run, either in the job's image; for a
job with a sweep its smoke check, or with --full its trials one after another) and the smoke check before `vdk
deploy`. Which run the flags and settings ask for, the import check before it, the run itself
(ops/plan_runner.py), and its outcome with the diagnosis of a failure (`diagnosis/`).

What the user reads as the run goes is the reporter's (ops/reporting.py; cli/console.py prints it): the start
line is shown before a run that may take hours, the summary when it ends."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Union

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
from vdk.plugin.ml_training.local.overlay import Overlay
from vdk.plugin.ml_training.ops.configuration import or_environment
from vdk.plugin.ml_training.ops.imports import check_job_imports
from vdk.plugin.ml_training.ops.local_result import LocalRunFailed
from vdk.plugin.ml_training.ops.local_result import LocalRunResult
from vdk.plugin.ml_training.ops.plan_runner import run_plan
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.source.job_files import FileSet

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image.build_progress import Activity
    from vdk.plugin.ml_training.image.build_progress import Progress
    from vdk.plugin.ml_training.ops.sweep_local import LocalSweep
    from vdk.plugin.ml_training.ops.sweep_smoke import SweepSmoke

# What `vdk run` of a job gives: a run's result; for a sweep its smoke check, or its trials run in full
LocalJobResult = Union[LocalRunResult, "SweepSmoke", "LocalSweep"]


def run_mode(
    configuration: Any,
    job_dir: Path | None = None,
    full: bool = False,
    container: bool = False,
    section: Mapping[str, str] | None = None,
) -> tuple[str, bool]:
    """(smoke or full, whether in the job's image) from the flags (`full`, `container`), else
    ml_training_run_mode (the environment, else [vdk] of the job's config.ini: `section`, its keys as the spec
    carries them, or read from `job_dir`)."""
    mode = str(setting(configuration, RUN_MODE, job_dir, section)[0] or protocol.SMOKE).strip().lower()
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
    reporter: Reporter | None = None,
    full: bool = False,
    container: bool = False,
    check_imports: bool = True,
) -> LocalJobResult:
    """`vdk run JOB`: the run the flags (`full`, `container`) or the settings in `configuration` ask for (None:
    the environment's, then [vdk] of the job's config.ini), after the import check (unless `check_imports` is
    False), told to `reporter` as it goes (None: nothing told; the result says everything). The datasets of
    [ml-training.data] are sampled for a smoke run and fetched whole for a full one (the reporter's progress
    shows it). A job with a sweep: its smoke check (a `SweepSmoke`), or with `full` its trials one after
    another (a `LocalSweep`; a sweep whose first trials all fail raises, saying why)."""
    reporter = or_quiet(reporter)
    configuration = or_environment(configuration)
    mode, in_container = run_mode(configuration, spec.job_dir, full, container, spec.vdk_settings)
    if spec.sweep is not None:
        return _run_sweep(spec, mode, in_container, check_imports, reporter)
    if spec.overrides:
        from vdk.plugin.ml_training.job.overrides import describe

        reporter.note(f"for this run, over config.ini: {describe(spec.overrides)}")
    base_unknown = False
    if check_imports:
        notes = check_imports_locally(spec)
        base_unknown = bool(notes)  # what the base provides is not known: checked again once it is read
        for note in notes:
            reporter.note(f"note: {note}")
    if in_container:
        from vdk.plugin.ml_training.ops import container_run

        engine = container_run.engine_from(configuration, spec.job_dir)
        plan, starter = container_run.prepare(spec, mode, engine, reporter.progress, recheck_imports=base_unknown)
        return run_plan(with_data(plan, reporter.progress), reporter, starter=starter)
    deps = _overlay(spec, reporter)  # the image has its dependency layer; here, the overlay
    plan = smoke_plan(spec, overlay=deps) if mode == protocol.SMOKE else full_plan(spec, overlay=deps)
    return run_plan(with_data(plan, reporter.progress), reporter)


def _run_sweep(
    spec: MLJobSpec, mode: str, in_container: bool, check_imports: bool, reporter: Reporter
) -> SweepSmoke | LocalSweep:
    """`vdk run` of a job with a sweep: its smoke check (ops/sweep_smoke.py), or its trials in full, one after
    another on this machine (ops/sweep_local.py)."""
    sweep = spec.sweep
    assert sweep is not None
    if in_container:
        raise MLTrainingError(
            "a sweep's smoke check runs on this machine, not in the job's image",
            "run `vdk run JOB` without --container (and without ml_training_run_mode = container); "
            "`vdk run --container` checks a job without a sweep",
        )
    if check_imports:
        for note in check_imports_locally(spec):
            reporter.note(f"note: {note}")
    if mode == protocol.FULL:
        from vdk.plugin.ml_training.ops.sweep_local import run_sweep

        reporter.note(f"Sweep of {spec.name}: {sweep.trials} trials on this machine, one after another")
        return run_sweep(spec, reporter)
    from vdk.plugin.ml_training.ops.sweep_smoke import smoke_check_sweep

    reporter.note(
        f"Smoke check of the sweep of {spec.name}: the arguments of its {sweep.trials} trials, and the smoke steps "
        f"of the trials at the extremes (CPU; {sweep.metric} each reports)"
    )
    return smoke_check_sweep(spec)


def with_data(plan: LaunchPlan, progress: Progress | None = None) -> LaunchPlan:
    """The plan with the job's datasets of [ml-training.data] on this machine (ops/data_samples.py): a sample for
    a smoke run, each whole for a full run (`progress` shows the fetch)."""
    if not plan.spec.data:
        return plan
    from vdk.plugin.ml_training.ops.data_samples import local_datasets

    datasets, notes = local_datasets(plan.spec, plan.mode, progress)
    return dataclasses.replace(plan, data=datasets, notes=(*plan.notes, *notes))


def smoke_check(
    spec: MLJobSpec, again: str, reporter: Reporter, files: FileSet | None = None, activity: Activity | None = None
) -> LocalRunFailed | None:
    """The smoke run before a deploy: its output on stderr (the deploy's stdout is its result), the error to
    report if it failed, with a fix that ends with `again`. `files`: the job directory's files as the deploy
    found them (its working directory holds them; the image's code layer will). `activity`: the overlay's, made
    and closed by the caller (overlay_activity), when the smoke run may be interrupted by a signal's exception.
    (A sweep's is ops/sweep_smoke.py's.)"""
    deps = _overlay(spec, reporter, activity)
    plan = smoke_plan(spec, overlay=deps, files=files)
    return run_plan(with_data(plan), reporter, again=again, stdout=sys.stderr).error


def overlay_activity(reporter: Reporter) -> Activity:
    """What says the overlay's install: its steps as the run's notes and, when uv is quiet (one long download),
    `still working, N s so far` every 10 s, until closed."""
    from vdk.plugin.ml_training.image.build_progress import LineProgress

    return LineProgress(reporter.note, prefix="  ").activity("dependency overlay")


def _overlay(spec: MLJobSpec, reporter: Reporter, activity: Activity | None = None) -> Overlay | None:
    """The job's dependency overlay (local/overlay.py), said by `activity` (else by one of its own), which is
    closed once the overlay is ready (closing it again is harmless: a caller that made it closes it too)."""
    own = activity or overlay_activity(reporter)
    try:
        return overlay.prepare(spec, reporter.note, own)
    finally:
        own.close()


def check_imports_locally(spec: MLJobSpec) -> list[str]:
    """The import check with what is known of the base image without contacting its registry: raises
    ImportCheckFailed, returns notes about imports the base image may provide."""
    from vdk.plugin.ml_training.image.base_facts_cache import known_provides

    return check_job_imports(spec, known_provides(spec))
