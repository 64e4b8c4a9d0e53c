"""`vdk delete` for ml-training jobs: every run of the job of one team and their records, after a confirmation
(`--yes`), one function of the API (`api.delete_runs`); another team's runs only when that team is named with -t.

Every vdk command imports the verbs (`vdk run` included): kubernetes and the k8s package are imported when a verb
runs.
"""

from __future__ import annotations

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_scope import job_path_option
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import name_option
from vdk.plugin.ml_training.cli.cluster_scope import names_ml_job
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.cluster_scope import verb_scope
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.vocabulary.human_units import counted


def delete_ml(name: str | None, team: str | None, job_path: str | None, yes: bool) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.runs.selection import where

    def confirm(selection: api.JobSelection) -> bool:
        one = len(selection.runs) == 1
        what = f"{counted(len(selection.runs), 'run')} of {selection.describe()}"
        stderr(f"Runs of {selection.heading()} in {where(selection.client)}:")
        stderr(cluster_views.runs_text(selection.runs))
        if yes:
            stderr(f"Deleting {what} (--yes)")
        else:
            these, records = (
                ("this", "its pods (running ones stop) and run record")
                if one
                else ("these", "their pods (running ones stop) and run records")
            )
            click.confirm(f"Delete {these} {what}, {records}?", abort=True, err=True)
        return True

    done = api.delete_runs(verb_scope(name, team, job_path, "delete"), confirm=confirm, reporter=Console())
    selection = done.selection
    for other in selection.others:
        kept = other.describe() if other.label is None else f"runs of {other.describe()}"
        stderr(f"Kept: {selection.job_name}'s {kept}")


DELETE = verbs.Verb(
    name="delete",
    help="Delete an ml-training job: all its runs (running ones are stopped) and their records.",
    ml_help=(
        "ml-training jobs: deletes every run of the job of one team from the cluster (asks first unless --yes); "
        "another team's runs only when that team is named with -t."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        click.Option(["--yes"], is_flag=True, help="Do not ask for confirmation."),
    ],
    ml_only=("job_path",),
    is_ml=names_ml_job,
    run_ml=ml_errors(delete_ml),
)
