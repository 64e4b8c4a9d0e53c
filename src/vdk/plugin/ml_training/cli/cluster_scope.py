"""What the cluster verbs (`vdk list`, `show`, `delete`, `execute`: cli/list_command.py, show_command.py,
delete_command.py, execute_command.py) share: their options (the Control Service CLI's names), whether an
invocation is for ML, its Scope (computed once per command, ops/scope.py), and how errors and JSON are printed.

With the Control Service CLI installed the verbs wrap its commands:
- `list` shows the ML jobs of the kube context's namespace whenever a kube context is configured,
  then the Control Service's data jobs when its URL is set.
- `show`, `delete` and `execute -n NAME` are for ML when runs labelled `vdk.io/job-name=NAME` exist
  in the cluster, or with -p, or when run in an ml-training job's directory; otherwise (and whenever the
  cluster is unconfigured or unreachable) the Control Service's command runs unchanged.
Without it, they always mean ML jobs.

Every vdk command imports this module (`vdk run` included): kubernetes and the k8s package are imported
when a verb runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

import click

from vdk.plugin.ml_training.secret_patterns import printable

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Scope
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection

log = logging.getLogger(__name__)

_SCOPE_KEY = "vdk_ml_training.scope"


# --- options (the Control Service CLI's names) ------------------------------------------------------


def name_option() -> click.Option:
    return click.Option(["-n", "--name"], help="The job name.")


def team_option() -> click.Option:
    return click.Option(
        ["-t", "--team"],
        help="The team whose runs to work on [with -p the job's [owner] team, else your default team "
        "(`vdk set-default`), else that of the job directory you are in]; `-t ''`: the runs without a team.",
    )


def job_path_option() -> click.Option:
    return click.Option(
        ["-p", "--job-path"],
        type=click.Path(exists=True, file_okay=False, dir_okay=True, resolve_path=True),
        help="ml-training: the job directory; its name and [owner] team are the defaults of -n and -t.",
    )


def execution_id_option(verb: str) -> click.Option:
    """-i RUN: a run of the job (its name, or the part after the job name); default the latest."""
    what = "shows" if verb == "show" else "works on"
    return click.Option(
        ["-i", "--execution-id"],
        help=f"The run: its name, or the part after the job name [the latest]; `vdk {verb}` {what} that run.",
    )


def output_option() -> click.Option:
    return click.Option(
        ["-o", "--output"],
        type=click.Choice(["text", "json"], case_sensitive=False),
        default="text",
        help="Format of the result: text or json.",
    )


# --- is this invocation for ML? ------------------------------------------------------------------------


def wrapped() -> bool:
    """Whether the Control Service CLI's command is wrapped (else the plugin's own verb runs)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and getattr(ctx.command, "wrapped_command", None) is not None


def kube_configured(job_path: str | None = None) -> bool:
    """A kube context may be reachable: a kubeconfig file, a configured context, or a pod's service
    account. Local checks only: data-job commands must not pay for a cluster they do not use."""
    from vdk.plugin.ml_training.cli.context import job_config as read
    from vdk.plugin.ml_training.cli.context import settings_from_click
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.k8s import kubeconfig
    from vdk.plugin.ml_training.ops.scope import job_config

    try:
        context = settings_from_click(job_config(job_path, read)).get("kube_context")
    except MLTrainingError:  # a broken config.ini here: the verb reports it, if it is for ML
        context = None
    if context or kubeconfig.in_a_pod():
        return True
    return any(os.path.isfile(p) for p in kubeconfig.kubeconfig_paths())


def not_listed(error: MLTrainingError) -> None:
    """Why `vdk list` shows no ML jobs while it goes on with the Control Service's data jobs."""
    click.echo(f"ml-training jobs are not listed: {error.message}", err=True)


def list_is_ml(kwargs: dict[str, Any]) -> bool:
    if not wrapped() or kube_configured():
        return True
    if not kwargs.get("rest_api_url"):
        # The Control Service's list fails next for want of its URL; the user may have been looking
        # for ML runs, so say why there are none. (With a URL, data-job users are not bothered.)
        from vdk.plugin.ml_training.k8s.api_errors import no_cluster_configured
        from vdk.plugin.ml_training.k8s.kubeconfig import kubeconfig_paths

        not_listed(no_cluster_configured(kubeconfig_paths()))
    return False


def names_ml_job(kwargs: dict[str, Any]) -> bool:
    """show/delete/execute: ML with -p, in an ml-training job's directory, or when the cluster has runs of
    -n NAME. A cluster that is not configured, not reachable or not readable means "not ML": the data-job
    command runs."""
    if not wrapped() or kwargs.get("job_path"):
        return True
    if not kube_configured(kwargs.get("job_path")):
        return False
    from vdk.plugin.ml_training.errors import MLTrainingError

    name = kwargs.get("name")
    try:
        found = scope(name, kwargs.get("team"), None)
        if found.job_dir is not None and not name:
            return True  # run in an ml-training job's directory
        return found.job_name is not None and found.job_name != "" and found.client.has_runs(found.job_name)
    except MLTrainingError as e:
        log.debug("Not looking for ml-training runs of %s: %s", name, e.problem)
        return False


# --- shared ------------------------------------------------------------------------------------------


def scope(name: str | None, team: str | None, job_path: str | None) -> Scope:
    """The invocation's Scope (ops/scope.py), computed once per command: deciding whether it is for ML
    and the verb itself share it, and its client."""
    ctx = click.get_current_context()
    if _SCOPE_KEY not in ctx.meta:
        from vdk.plugin.ml_training.api import find_scope
        from vdk.plugin.ml_training.cli.context import configuration
        from vdk.plugin.ml_training.cli.context import job_config
        from vdk.plugin.ml_training.cli.context import team_option as given_team

        option, default = given_team(team)
        ctx.meta[_SCOPE_KEY] = find_scope(
            name, option, job_path, default_team=default, configuration=configuration(), read=job_config
        )
    return ctx.meta[_SCOPE_KEY]


def verb_scope(name: str | None, team: str | None, job_path: str | None, verb: str) -> Scope:
    """The scope of a verb that works on one job: an error for the command line without a job name."""
    found = scope(name, team, job_path)
    if not found.job_name:
        raise click.UsageError(
            f"`vdk {verb}` of an ml-training job needs -n/--name: the job name (`vdk list` shows them), "
            "or -p/--job-path: the job directory"
        )
    return found


def team_args(selection: JobSelection) -> str:
    """The -t to repeat in a suggested command; none when the default team or the only team was meant."""
    from vdk.plugin.ml_training.job.teams import FROM_DEFAULT

    choice = selection.choice
    if (choice is not None and choice.source == FROM_DEFAULT) or (choice is None and selection.team.label is None):
        return ""
    return " " + selection.team.option()


def ml_errors(run_ml: Callable[..., None]) -> Callable[..., None]:
    """MLTrainingError -> the problem and its fix on stderr, exit code 1. SIGINT, SIGTERM and SIGHUP stop the
    verb the same way (cli/interrupts.py): what it was creating is deleted again (a run being started, a copy
    pod), a line says what was left, and vdk exits with 128 + the signal's number."""

    def run(**kwargs: Any) -> None:
        from vdk.plugin.ml_training.cli import interrupts
        from vdk.plugin.ml_training.cli.context import fail
        from vdk.plugin.ml_training.errors import MLTrainingError

        verb = click.get_current_context().info_name or "command"
        with interrupts.stop_on_signals():
            try:
                return run_ml(**kwargs)
            except MLTrainingError as e:
                fail(e)
            except KeyboardInterrupt as e:
                interrupts.exit_interrupted(e, f"vdk {verb} interrupted by {interrupts.as_interrupted(e).name}.")

    return run


def print_json(data: Any) -> None:
    click.echo(json.dumps(_strict(data), indent=2, sort_keys=False, allow_nan=False))


def _strict(data: Any) -> Any:
    """`data` with NaN and infinities (a diverged loss) as null: strict JSON parsers reject them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _strict(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_strict(value) for value in data]
    return data


def stderr(text: str) -> None:
    """A line of the command line's own on stderr (a prompt's context, a hint), as its reporter's notes are: what it
    quotes of a server's or a pod's words with its control characters escaped."""
    click.echo(printable(text), err=True)


def say_started(selection: JobSelection, run_name: str, what: str, image: str) -> None:
    """`Started run RUN of JOB: WHAT`, its image, and how to follow it."""
    again = f"-n {selection.job_name}{team_args(selection)}"
    click.echo(f"Started run {run_name} of {selection.describe()}: {what}")
    click.echo(f"  image   {image}")
    click.echo(f"Follow it:  vdk show {again}      logs of every rank:  vdk execute --logs {again} --follow")
