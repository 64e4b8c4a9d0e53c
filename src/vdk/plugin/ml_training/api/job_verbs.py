"""The verbs of a job directory: reading the job (`job_spec`, `deploy_spec`), `vdk run` (`run_job`), `vdk deploy`
and its dry run and build (`deploy`, `plan_deploy`, `build`), following the run a deploy started, and VDK's
default team. Each is the use case of ops/ that the command line calls, with nothing of click; the heavy modules
(torch's launcher, the image builder, kubernetes) are imported when a function runs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdk.plugin.ml_training.image import PushedImage
    from vdk.plugin.ml_training.job import MLJobSpec
    from vdk.plugin.ml_training.job.config_file import JobConfig
    from vdk.plugin.ml_training.job.settings import ConfigurationLike
    from vdk.plugin.ml_training.ops.deploy_plan import DeployPlan
    from vdk.plugin.ml_training.ops.deploy_plan import DeployResult
    from vdk.plugin.ml_training.ops.deploy_plan import Unchanged
    from vdk.plugin.ml_training.ops.follow import FollowedRun
    from vdk.plugin.ml_training.ops.local_run import LocalJobResult
    from vdk.plugin.ml_training.ops.reporting import Reporter


def parse_overrides(sets: Iterable[str] = (), args: str | None = None) -> dict[str, str]:
    """The keys of [ml-training] for one run, as `--set KEY=VALUE` and `--args TEXT` give them.

    Args:
        sets: `KEY=VALUE` items, in order (a key once).
        args: the entrypoint's arguments for this run (same as `args=TEXT`).

    Returns:
        {key: value}, for the `overrides` of `job_spec` and `deploy_spec`.

    Raises:
        MLTrainingError: an item that is not KEY=VALUE, or a key given twice.
    """
    from vdk.plugin.ml_training.job.overrides import parse_overrides as parse

    return parse(sets, args)


def job_spec(
    job_path: str | Path | JobConfig,
    *,
    overrides: dict[str, str] | None = None,
    configuration: ConfigurationLike | None = None,
) -> MLJobSpec:
    """The job at `job_path` as `vdk run` reads it: its config.ini validated, with VDK's settings.

    Args:
        job_path: the job directory (its config.ini says `[job] type = ml-training`), or its config.ini read
            already (`JobConfig`); read once, for the settings and the spec.
        overrides: [ml-training] keys for this run only (`parse_overrides`); config.ini is not changed.
        configuration: VDK's configuration (None: the environment's `VDK_ML_TRAINING_*`, then [vdk] of the
            job's config.ini).

    Returns:
        The job's `MLJobSpec` (frozen).

    Raises:
        JobConfigError: a key of config.ini that is wrong, naming the file, the key and the fix.
    """
    from vdk.plugin.ml_training.job import load_job_spec
    from vdk.plugin.ml_training.job.config_file import job_config
    from vdk.plugin.ml_training.job.settings import job_settings
    from vdk.plugin.ml_training.ops.configuration import or_environment

    config = job_config(job_path)
    return load_job_spec(config, job_settings(or_environment(configuration), config), overrides=overrides)


def deploy_spec(
    job_path: str | Path | JobConfig,
    *,
    name: str | None = None,
    team: str | None = None,
    default_team: str | None = None,
    backend: str | None = None,
    import_check: bool = True,
    overrides: dict[str, str] | None = None,
    configuration: ConfigurationLike | None = None,
) -> MLJobSpec:
    """The job at `job_path` as `vdk deploy` reads it: named as Kubernetes allows, its team checked.

    Args:
        job_path: the job directory, or its config.ini read already (`JobConfig`).
        name: the job's name (default: the directory's, as Kubernetes allows it).
        team: the team (-t; default `[owner] team` of config.ini, else `default_team`).
        default_team: VDK's default team (`default_team()` reads the one `vdk set-default` wrote).
        backend: overrides the job's `backend` (auto, pytorchjob, trainjob, job).
        import_check: False skips the check that the image has every module the job imports.
        overrides: [ml-training] keys for this run only (`parse_overrides`), kept in the run's record.
        configuration: VDK's configuration (None: the environment's, then [vdk] of the job's config.ini).

    Returns:
        The job's `MLJobSpec`, with its team's namespace and queue.

    Raises:
        MLTrainingError: a team that cannot be a label value, a sweep the cluster cannot run; JobConfigError for
            a wrong key of config.ini.
    """
    from vdk.plugin.ml_training.ops import deploy

    return deploy.deploy_spec(
        job_path,
        name=name,
        team=team,
        default_team=default_team,
        backend=backend,
        import_check=import_check,
        configuration=configuration,
        overrides=overrides,
    )


def run_job(
    spec: MLJobSpec,
    *,
    full: bool = False,
    container: bool = False,
    check_imports: bool = True,
    configuration: ConfigurationLike | None = None,
    reporter: Reporter | None = None,
) -> LocalJobResult:
    """`vdk run JOB`: the smoke run on this machine's CPU (or the run `full`/`container` ask for), after the
    import check; for a job with a sweep, its smoke check, or with `full` its trials one after another.

    Args:
        spec: the job (`job_spec`).
        full: train to completion on this machine (no CPU stand-ins, no step limit, the datasets whole).
        container: run inside the job's image, the one a deploy pushes (podman or Docker).
        check_imports: False skips the import check.
        configuration: VDK's configuration, for `ml_training_run_mode` (None: the environment's, then [vdk] of
            the job's config.ini).
        reporter: told the run's notes, its start and its end (None: nothing is told). The ranks' own output
            goes to stdout.

    Returns:
        A `LocalRunResult` (`passed`, the outcome of every rank, the `finding` and `error` of a failure); for a
        sweep a `SweepSmoke` (every trial checked, the extremes' runs), or with `full` a `LocalSweep` (the
        study's trial `table`). Each has `passed` and `error`.

    Raises:
        MLTrainingError: what stops the run before it starts (an undeclared import, no torch, a bad setting),
            or a full sweep whose first trials all failed. KeyboardInterrupt: every process it started was
            stopped first.
    """
    from vdk.plugin.ml_training.ops import local_run

    return local_run.run_job(spec, configuration, reporter, full=full, container=container, check_imports=check_imports)


def plan_deploy(spec: MLJobSpec, *, reason: str | None = None, reporter: Reporter | None = None) -> DeployPlan:
    """`vdk deploy --dry-run`: what a deploy would build and start. Contacts no cluster, and no registry but
    that of a base image whose Python and packages are not known yet.

    Args:
        spec: the job (`deploy_spec`).
        reason: why, as the run's audit trail would keep it.
        reporter: told the image plan and where the run would go (notes).

    Returns:
        A `DeployPlan`: the image plan, the target, the run's manifests (`to_yaml()`).

    Raises:
        MLTrainingError: an import the base image does not have, or a base that cannot be read.
    """
    from vdk.plugin.ml_training.ops import deploy

    return deploy.plan_deploy(spec, reason=reason, reporter=reporter)


def build(spec: MLJobSpec, *, skip_smoke: bool = False, reporter: Reporter | None = None) -> PushedImage:
    """`vdk deploy --build-only`: the smoke run beside the remote checks, then the job's image built and pushed;
    nothing is started.

    Args:
        spec: the job (`deploy_spec`).
        skip_smoke: do not run the smoke check first.
        reporter: told the checks, the smoke run and the build's progress.

    Returns:
        The `PushedImage`: its reference pinned by digest, its layers and dependencies.

    Raises:
        MLTrainingError: the first problem of the checks or the smoke run (nothing was pushed), or of the build.
    """
    from vdk.plugin.ml_training.ops import deploy

    return deploy.build(spec, skip_smoke=skip_smoke, reporter=reporter)


def deploy(
    spec: MLJobSpec,
    *,
    reason: str | None = None,
    skip_smoke: bool = False,
    if_changed: bool = False,
    reporter: Reporter | None = None,
) -> DeployResult | Unchanged:
    """`vdk deploy`: the smoke run beside the remote checks, the image built and pushed, the run created on the
    cluster, all or nothing.

    Args:
        spec: the job (`deploy_spec`).
        reason: why this deploy, kept in the run's audit trail.
        skip_smoke: do not run the smoke check first.
        if_changed: start nothing when neither the code, the requirements, the configuration, the base image
            nor a dataset changed since the job's last successful run, or when a run of the job that has not ended
            yet (pending, queued, running) is the same; concurrent calls start one run (they take turns with the
            job's Lease, `<job>-deploy`).
        reporter: told the checks, the smoke run, the build's progress and what changed since the job's last
            run (`changes`, before anything starts).

    Returns:
        A `DeployResult` (the plan applied, the image, what was created, what changed), or with `if_changed`
        an `Unchanged` when nothing did, or a run not ended yet is the same (its `active`, `reason`; `started`
        tells them apart).

    Raises:
        MLTrainingError: any problem, before anything was created, saying so; what an interrupted create made is
            deleted again (or named, with the command that deletes it), and a training object the API server
            writes after it gave up is deleted by Kubernetes as it appears (its owner, the run's record, is gone).
    """
    from vdk.plugin.ml_training.ops import deploy as deploy_job

    return deploy_job.deploy(spec, reason=reason, skip_smoke=skip_smoke, if_changed=if_changed, reporter=reporter)


def follow_deployed(result: DeployResult, *, reporter: Reporter | None = None) -> FollowedRun:
    """`vdk deploy --follow`: the run a deploy just started, followed to its end.

    Args:
        result: what `deploy` returned (started).
        reporter: told rank 0's lines (`log_line`), each failed container (`rank_failed`), why ranks have no log
            yet (notes).

    Returns:
        A `FollowedRun`: the run's last state, the rank failures seen, the diagnosis of a run that failed.

    Raises:
        MLTrainingError: the cluster cannot be read. KeyboardInterrupt stops following (the run goes on).
    """
    from vdk.plugin.ml_training.ops.follow import follow_deployed as follow

    return follow(result, reporter)


def default_team() -> str | None:
    """`vdk set-default` without -t: VDK's default team, the one the verbs use when none is named.

    Returns:
        The team `vdk set-default -t TEAM` (or `set_default_team`) wrote, or None.

    Raises:
        MLTrainingError: the file that holds it cannot be read.
    """
    from vdk.plugin.ml_training.job import teams

    return teams.default_team()


def set_default_team(team: str | None) -> Path:
    """`vdk set-default -t TEAM` (None: `vdk reset-default -t`), in the file the Control Service CLI reads too.

    Args:
        team: the team the verbs use when none is named, or None to forget it.

    Returns:
        The file written.

    Raises:
        MLTrainingError: a team that cannot be a label value, with a name that can.
    """
    from vdk.plugin.ml_training.job import teams

    if team is not None:
        teams.team_label(team)
        team = team.strip()
    return teams.write_default_team(team)
