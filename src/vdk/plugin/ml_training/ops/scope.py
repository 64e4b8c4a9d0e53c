"""Which runs a verb works on: the scope of a call (the team, the job, the kube context and namespace) from
its options, VDK configuration and the directory it runs in; and the runs of that (team, job), chosen by
k8s/runs/selection.py. Every use case of the cluster starts here.

The team: `team`, else the `[owner] team` of the job at `job_path`, else VDK's default team (`vdk
set-default`), else the `[owner] team` of the ml-training job directory the call runs in. The job name:
`name`, else the name of that job directory. The namespace: the job's `namespace` key, else the team's
entry of ml_training_team_namespaces, else ml_training_namespace, else the kube context's. Of a job directory's
config.ini only what says these is read (job.load_job_identity): a key the verbs do not use cannot stop them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import read_job_config
from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.job.settings import Settings
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.ops.configuration import or_environment
from vdk.plugin.ml_training.ops.reporting import Reporter
from vdk.plugin.ml_training.ops.reporting import or_quiet
from vdk.plugin.ml_training.ops.typed_calls import checked

if TYPE_CHECKING:  # kubernetes is imported when a verb needs the cluster, not when vdk starts
    from vdk.plugin.ml_training.job.teams import TeamChoice
    from vdk.plugin.ml_training.k8s.client import KubeClient
    from vdk.plugin.ml_training.k8s.runs.selection import JobSelection
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary


@dataclass(frozen=True)
class Scope:
    """What a verb works on: the team it chose (and why), the job's name and directory, where its runs are."""

    team: TeamChoice | None
    job_name: str | None
    job_dir: Path | None  # the job named with `job_path`, or the one the call runs in
    context: str | None
    namespace: str | None
    settings: Settings = field(default_factory=Settings, compare=False, repr=False)  # VDK's, for that directory

    @cached_property
    def client(self) -> KubeClient:
        """The connection to the scope's cluster and namespace, made once."""
        from vdk.plugin.ml_training.k8s.client import KubeClient

        return KubeClient(self.context, self.namespace)


# How a call reads a job directory's config.ini: the command line hands one that reads each file once per command.
ConfigReader = Callable[[Path], JobConfig]


def job_config(job_path: str | Path | None, read: ConfigReader = read_job_config) -> JobConfig | None:
    """The config.ini of the job a verb works on: `job_path`'s, else that of the ml-training job directory it runs in
    (None: neither). `read` reads a job directory's config.ini."""
    if job_path:
        return read(Path(job_path))
    try:
        here = read(Path.cwd())
    except JobConfigError:
        return None
    return here if here.is_ml else None


@checked
def find_scope(
    name: str | None = None,
    team: str | None = None,
    job_path: str | Path | None = None,
    *,
    default_team: str | None = None,
    configuration: ConfigurationLike | None = None,
    read: ConfigReader = read_job_config,
) -> Scope:
    """The scope of a call: `team` as the user gave it (-t; '' for the runs without a team), `default_team`
    VDK's default team (`vdk set-default`: `job.teams.default_team()`), `configuration` VDK's (None: the
    environment's, ops/configuration.py; then [vdk] of the job's config.ini). Reads config.ini files only (each
    once, through `read`); contacts no cluster."""
    from vdk.plugin.ml_training.job import load_job_identity
    from vdk.plugin.ml_training.job import teams

    job = job_config(job_path, read)
    named = job if job_path else None
    here = None if job_path else job
    # VDK settings: the environment, else [vdk] of the job's config.ini (named, or the one the call runs in)
    settings = job_settings(or_environment(configuration), job)
    choice = teams.choose_team(
        team,
        job=teams.OwnerTeam(named.team, named.path) if named else None,
        default=default_team,
        here=teams.OwnerTeam(here.team, here.path) if here else None,
    )
    if choice is not None and choice.name:
        teams.team_label(choice.name)  # a team that cannot be a label value has no runs: say so, with the fix
    if job is not None:
        identity = load_job_identity(job, settings, team=choice.name if choice else None)
        return Scope(
            choice, name or identity.kubernetes_name(), job.job_dir, identity.kube_context, identity.namespace, settings
        )
    namespace, _ = teams.team_value(settings, "namespace", choice.name if choice else None)
    return Scope(choice, name, None, settings.get("kube_context"), namespace, settings)


def connected(scope: Scope, reporter: Reporter | None = None) -> KubeClient:
    """The scope's client, the retries of its requests told to `reporter` as notes (none: not told)."""
    client = scope.client
    client.transport.say = or_quiet(reporter).note
    return client


def select_runs(
    scope: Scope, command: str, changes: bool = False, partial: bool = False, reporter: Reporter | None = None
) -> JobSelection:
    """The runs of the scope's (team, job) (see k8s.selection.select_job). `command`: the verb and its
    operation (`execute --cancel -i RUN`), for the commands that errors suggest. `changes`: the caller
    changes runs (delete, cancel), so another team's runs only when that team was named. `partial`: a view,
    which shows the runs it could list when a list fails (the selection's `notes` say what is missing).
    `reporter`: told the retries of the requests. A job name that no run can carry (not a job name of the
    naming grammar) is an error here, before it goes into a label selector."""
    from vdk.plugin.ml_training.job import names
    from vdk.plugin.ml_training.k8s.runs import pending_records
    from vdk.plugin.ml_training.k8s.runs.selection import select_job

    verb, _, operation = command.partition(" ")
    name = scope.job_name
    if not name:
        raise MLTrainingError(
            f"`vdk {verb}` of an ml-training job needs the job's name",
            "name the job (-n/--name; `vdk list` shows them), or give its directory (-p/--job-path)",
        )
    names.kubernetes_job_name(name, Path(name), from_option=True)
    suggestion = f"vdk {verb}{' ' + operation if operation else ''} -n {name}"
    client = connected(scope, reporter)
    pending_records.settle(client, name)  # records whose run's creation never completed, before the runs
    return select_job(client, name, scope.team, suggestion, changes=changes, partial=partial)


def pick_run(
    scope: Scope,
    command: str,
    run_id: str | None = None,
    *,
    changes: bool = False,
    partial: bool = False,
    reporter: Reporter | None = None,
) -> tuple[JobSelection, RunSummary]:
    """The run of the scope's job that `run_id` names — its name, or the part after `<job>-` (-i RUN) — else the
    latest, and the runs it was picked from (`select_runs`: `command`, `changes`, `partial`, `reporter`). Every
    verb that works on one run resolves it here."""
    selection = select_runs(scope, command, changes, partial, reporter)
    return selection, named_run(selection, run_id, command)


def named_run(selection: JobSelection, run_id: str | None, command: str) -> RunSummary:
    """The run of `selection` that `run_id` names (its name, or the part after `<job>-`), else the latest; an
    error that names the team it belongs to, or the job's runs. `command`: the verb as the error suggests it
    again (`execute --logs -i RUN`)."""
    return selection.pick(run_id, f"vdk {command} -n {selection.job_name}")


def execute_command(operation: str, run_id: str | None = None) -> str:
    """`execute --OPERATION [-i RUN]`: the command that errors about a run suggest again."""
    return f"execute --{operation}" + (f" -i {run_id}" if run_id else "")
