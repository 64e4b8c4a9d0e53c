"""`vdk show` for ml-training jobs: the job's recent runs and its latest (or `-i RUN`) in detail, one function of the
API (`api.show_job`; `--provenance`: cli/provenance_views.py; `--board`, `--dashboard`: cli/viewer_views.py), as
text (cli/cluster_views.py) or JSON. Teams: every verb works on the runs of one (team, job) — ops/scope.py says
where the team comes from, `k8s.runs.selection` how the runs are chosen.

Every vdk command imports the verbs (`vdk run` included): kubernetes and the k8s package are imported when a verb
runs.
"""

from __future__ import annotations

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.cluster_scope import execution_id_option
from vdk.plugin.ml_training.cli.cluster_scope import job_path_option
from vdk.plugin.ml_training.cli.cluster_scope import ml_errors
from vdk.plugin.ml_training.cli.cluster_scope import name_option
from vdk.plugin.ml_training.cli.cluster_scope import names_ml_job
from vdk.plugin.ml_training.cli.cluster_scope import output_option
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import team_args
from vdk.plugin.ml_training.cli.cluster_scope import team_option
from vdk.plugin.ml_training.cli.cluster_scope import verb_scope
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.vocabulary.human_units import counted

SHOW_RUNS = 10  # runs in `vdk show`'s table (all with -o json and `vdk execute --list`)


def show_ml(
    name: str | None,
    team: str | None,
    job_path: str | None,
    output: str | None,
    execution_id: str | None = None,
    provenance: bool = False,
    public_key: str | None = None,
    board: bool = False,
    dashboard: bool = False,
    last: int | None = None,
    to: str | None = None,
) -> None:
    from vdk.plugin.ml_training.cli import cluster_views
    from vdk.plugin.ml_training.k8s.runs.selection import where

    if board or dashboard or last is not None or to is not None:
        from vdk.plugin.ml_training.cli.viewer_views import show_viewer

        show_viewer(verb_scope(name, team, job_path, "show"), execution_id, board, dashboard, last, to, output)
        return

    if provenance or public_key:
        from vdk.plugin.ml_training.cli.provenance_views import show_provenance

        show_provenance(verb_scope(name, team, job_path, "show"), execution_id, public_key, output)
        return
    job = api.show_job(verb_scope(name, team, job_path, "show"), execution_id, reporter=Console())
    if (output or "text").lower() == "json":
        print_json(job.to_dict())
        return
    selection, detail, runs = job.selection, job.latest, job.runs
    name = selection.job_name
    again = f"-n {name}{team_args(selection)}"
    click.echo(f"{selection.heading()}: {counted(len(runs), 'run')} in {where(selection.client)}\n")
    click.echo(cluster_views.runs_text(runs[:SHOW_RUNS], {detail.run.name: detail.phase}))
    if len(runs) > SHOW_RUNS:
        click.echo(f"... and {len(runs) - SHOW_RUNS} older: vdk execute --list {again}")
    title = "Latest run" if detail.run.name == runs[0].name else "Run"
    click.echo("\n" + cluster_views.detail_text(detail, title=title))
    if job.sweep is not None:
        from vdk.plugin.ml_training.cli.sweep_views import sweep_text

        click.echo("\n" + sweep_text(job.sweep, again))
    click.echo(f"\nLogs of every rank: vdk execute --logs {again}")
    for other in selection.others:
        click.echo(f"note: {name} also has {other.describe()}: vdk show -n {name} {other.option()}")


SHOW = verbs.Verb(
    name="show",
    help=(
        "Show an ml-training job: its recent runs; for the latest, every rank's state, why it waits or failed, "
        "progress."
    ),
    ml_help=(
        "ml-training jobs: the job's runs, and for the latest its ranks, why it waits (scheduling, image pulls, "
        "Kueue) or failed (OOMKilled, exit codes, the failing rank's last log lines), its audit trail and progress; "
        "-i RUN shows that run instead of the latest (as `vdk execute --show -i RUN` does); --provenance: what "
        "its image says of itself (SBOM, signed build provenance), checked against the run record."
    ),
    params=[
        name_option(),
        team_option(),
        job_path_option(),
        output_option(),
        execution_id_option("show"),
        click.Option(
            ["--provenance"],
            is_flag=True,
            help="ml-training jobs: the SBOM and build provenance attached to the run's image, read from its "
            "registry, its signature verified (with --public-key) and checked against the run record; exit 1 on "
            "any finding.",
        ),
        click.Option(
            ["--public-key"],
            metavar="PATH",
            help="ml-training jobs, with --provenance: the public key (cosign.pub) to verify the signature with.",
        ),
        click.Option(
            ["--board"],
            is_flag=True,
            help="ml-training jobs: TensorBoard over the chosen runs' loss, metrics, steps/s, learning rate and GPU "
            "use (-i RUN, else the last ones; of this machine's full runs and the cluster's), on a loopback port "
            "until Ctrl-C; the event files are copied to --to DIR (default: vdk's cache).",
        ),
        click.Option(
            ["--dashboard"],
            is_flag=True,
            help="ml-training jobs with a sweep: Optuna's dashboard over a copy of the sweep's study (-i SWEEP, else "
            "the newest), on a loopback port until Ctrl-C.",
        ),
        click.Option(
            ["--last"],
            type=click.IntRange(min=1),
            metavar="N",
            help="ml-training jobs, with --board: the N newest runs [5].",
        ),
        click.Option(
            ["--to"],
            metavar="DIR",
            help="ml-training jobs, with --board: where to copy the event files [vdk's cache].",
        ),
    ],
    ml_only=("job_path", "execution_id", "provenance", "public_key", "board", "dashboard", "last", "to"),
    is_ml=names_ml_job,
    run_ml=ml_errors(show_ml),
)
