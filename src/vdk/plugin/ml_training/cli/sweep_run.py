"""`vdk run JOB` of a job with a sweep: its smoke check (ops/sweep_smoke.py) as a table of the checked trials and
the metric each reported; with `--full`, its trials one after another on this machine (ops/sweep_local.py),
ending with the trial table."""

from __future__ import annotations

from typing import Any

import click

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec


def run_sweep(
    spec: MLJobSpec, configuration: Any, full: bool, container: bool, check_imports: bool
) -> MLTrainingError | None:
    """The sweep's local run the flags ask for; returns the error to report (None: it passed)."""
    from vdk.plugin.ml_training.ops import local_run

    mode, in_container = local_run.run_mode(configuration, spec.job_dir, full, container)
    if in_container:
        raise MLTrainingError(
            "a sweep's smoke check runs on this machine, not in the job's image",
            "run `vdk run JOB` without --container (and without ml_training_run_mode = container); "
            "`vdk run --container` checks a job without a sweep",
        )
    if check_imports:
        for note in local_run.check_imports_locally(spec):
            click.echo(f"note: {note}", err=True)
    if mode == "full":
        return _full(spec)
    return _smoke(spec)


def _smoke(spec: MLJobSpec) -> MLTrainingError | None:
    from vdk.plugin.ml_training.cli.sweep_views import smoke_text
    from vdk.plugin.ml_training.ops.sweep_smoke import smoke_check_sweep

    sweep = spec.sweep
    assert sweep is not None
    click.echo(
        f"Smoke check of the sweep of {spec.name}: the arguments of its {sweep.trials} trials, and the smoke steps "
        f"of the trials at the extremes (CPU; {sweep.metric} each reports)",
        err=True,
    )
    result = smoke_check_sweep(spec)
    click.echo(smoke_text(result))
    return result.error


def _full(spec: MLJobSpec) -> MLTrainingError | None:
    from vdk.plugin.ml_training.cli.local_summary import SummaryPrinter
    from vdk.plugin.ml_training.cli.sweep_views import trial_table_text
    from vdk.plugin.ml_training.ops.sweep_local import run_sweep as run_trials
    from vdk.plugin.ml_training.ops.sweeps import trial_table

    sweep = spec.sweep
    assert sweep is not None
    click.echo(f"Sweep of {spec.name}: {sweep.trials} trials on this machine, one after another", err=True)
    try:
        local = run_trials(spec, SummaryPrinter(), say=lambda text: click.echo(text, err=True))
    except MLTrainingError as e:
        return e
    click.echo(trial_table_text(trial_table(local.snapshot, 0.0)))
    click.echo(f"The study: {local.study}", err=True)
    return None
