"""`vdk diff -n JOB RUN_A RUN_B`: two runs of an ml-training job side by side — how each ended (outcome, final
loss and metrics, duration, GPU-hours) and what changed from the first to the second (code, requirements,
configuration, base image, data); `-o json` for scripts. One function of the API: `api.diff_runs`.

Every vdk command imports this module: kubernetes is imported when the verb runs.
"""

from __future__ import annotations

from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_scope import job_path_option
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import name_option
from vdk.plugin.ml_training.cli.cluster_scope import output_option
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.cluster_scope import verb_scope
from vdk.plugin.ml_training.cli.console import Console


def diff_ml(
    name: str | None, team: str | None, job_path: str | None, output: str | None, run_a: str, run_b: str
) -> None:
    from vdk.plugin.ml_training.cli.diff_views import diff_text

    diff = api.diff_runs(verb_scope(name, team, job_path, "diff"), run_a, run_b, reporter=Console())
    if (output or "text").lower() == "json":
        print_json(diff.to_dict())
        return
    click.echo(diff_text(diff))


def _always(kwargs: dict[str, Any]) -> bool:
    return True  # no data job has runs to compare: every invocation is for ML


DIFF = verbs.Verb(
    name="diff",
    help=(
        "Compare two runs of an ml-training job: how each ended (outcome, final loss, duration, GPU-hours) and what "
        "changed from RUN_A to RUN_B (code files, requirements, config keys, base image, each dataset's version). "
        "RUN_A and RUN_B are run names or the part after the job name (`vdk execute --list` shows them)."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        output_option(),
        click.Argument(["run_a"]),
        click.Argument(["run_b"]),
    ],
    ml_only=(),
    is_ml=_always,
    run_ml=ml_errors(diff_ml),
)
