"""The verbs of the VDK Control Service (docs/control-service.md): whether a deploy goes through it
(`service_route`), the deploy through it (`deploy_through_service`) and following its execution
(`follow_execution`), what its set-up for ml-training lacks (`check_service_setup`), and the two programs the
service runs: the builder of its ml-training entry (`build_as_builder`) and the launcher in its data-job pod
(`launch_execution`). Each is the use case of ops/ that the command line calls, with nothing of click."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdk.plugin.ml_training.job import MLJobSpec
    from vdk.plugin.ml_training.job.config_file import JobConfig
    from vdk.plugin.ml_training.job.settings import ConfigurationLike
    from vdk.plugin.ml_training.ops.cs_deploy import ServiceDeployResult
    from vdk.plugin.ml_training.ops.cs_deploy import ServiceRoute
    from vdk.plugin.ml_training.ops.cs_launch import LaunchOutcome
    from vdk.plugin.ml_training.ops.cs_setup import SetupCheck
    from vdk.plugin.ml_training.ops.reporting import Reporter


def service_route(
    job_path: str | Path | JobConfig,
    team: str | None,
    rest_api_url: str | None = None,
    configuration: ConfigurationLike | None = None,
) -> ServiceRoute:
    """Whether `vdk deploy` of the job goes through the VDK Control Service: its URL is set (`rest_api_url`, else
    VDK_CONTROL_SERVICE_REST_API_URL or `vdk set-default -u`), it answers, and its supported Python versions list
    the ml-training entry its operator set up. Asked once, without retries.

    Args:
        job_path: the job's directory (its config.ini's [vdk] may name the entry), or its config.ini read already.
        team: the job's team (the service keeps jobs by team).
        rest_api_url: the Control Service's REST API URL, instead of VDK's setting.
        configuration: VDK's configuration (default: the environment).

    Returns:
        A `ServiceRoute`: `through`, and `why` in one line.

    Raises:
        MLTrainingError: the service refused the user's credentials (401, 403), with the fix.
    """
    from vdk.plugin.ml_training.ops import cs_deploy

    return cs_deploy.service_route(job_path, team, rest_api_url, configuration)


def deploy_through_service(
    spec: MLJobSpec,
    route: ServiceRoute,
    *,
    reason: str | None = None,
    skip_smoke: bool = False,
    start: bool = True,
    arguments: dict[str, str] | None = None,
    reporter: Reporter | None = None,
) -> ServiceDeployResult:
    """`vdk deploy` through the VDK Control Service: the smoke run here, the job's files uploaded (with its own
    commit), its schedule and contacts set, the deployment built by the service's builder, an execution started.

    Args:
        spec: the job (`deploy_spec`).
        route: `service_route`'s, through the service.
        reason: why this deploy, as the service records it.
        skip_smoke: do not run the smoke check first.
        start: start an execution once deployed (False: `--build-only`).
        arguments: [ml-training] keys for the execution's run only.
        reporter: told the smoke run and each step (notes).

    Returns:
        A `ServiceDeployResult`: the version deployed, the execution started and the run it names.

    Raises:
        MLTrainingError: a name or team the service cannot take, a failed smoke check (nothing uploaded), the
            service's refusal (its what, why and countermeasures), a builder that did not deploy in time.
    """
    from vdk.plugin.ml_training.ops import cs_deploy

    return cs_deploy.deploy_through_service(
        spec, route, reason=reason, skip_smoke=skip_smoke, start=start, arguments=arguments, reporter=reporter
    )


def follow_execution(
    route: ServiceRoute, team: str, job: str, execution: str, *, reporter: Reporter | None = None
) -> dict:
    """`vdk deploy --follow` through the Control Service: the execution's log as the service serves it, until
    the execution ends.

    Args:
        route: `service_route`'s, through the service.
        team: the job's team.
        job: the job's name.
        execution: the execution's id (`ServiceDeployResult.execution`).
        reporter: told each line of the execution's log (`execution_line`).

    Returns:
        The execution as the service last answered (its `status` and `message`).

    Raises:
        MLTrainingError: the service cannot be read. KeyboardInterrupt stops following (the execution goes on).
    """
    from vdk.plugin.ml_training.ops import cs_deploy

    assert route.endpoint is not None, "a route through the Control Service"
    return cs_deploy.follow_execution(route.endpoint, team, job, execution, reporter)


def check_service_setup(spec: MLJobSpec, route: ServiceRoute) -> list[SetupCheck]:
    """`vdk deploy --dry-run` with the Control Service's URL: what its set-up for ml-training has and lacks (the
    entry, the launcher's switch, its service account and token, its permissions, the deadline), each with the fix.

    Args:
        spec: the job (`deploy_spec`).
        route: `service_route`'s.

    Returns:
        The `SetupCheck`s, in order: `ok` True, False (missing) or None (could not be checked: its fix says how).

    Raises:
        MLTrainingError: never for what is missing (that is a check); a job the service cannot take.
    """
    from vdk.plugin.ml_training.ops import cs_setup

    return cs_setup.check_setup(spec, route)


def build_as_builder(argv: list[str], environ: dict[str, str], *, reporter: Reporter | None = None) -> bool:
    """`vdk-ml-training-builder`: the builder of the Control Service's ml-training entry, as the service starts it:
    the job fetched from the service's repository at its version, built, pushed and tagged as the service expects.

    Args:
        argv: the service's eleven positional arguments.
        environ: the service's variables (DATA_JOB_NAME, GIT_COMMIT, IMAGE_REGISTRY_PATH, ...).
        reporter: told everything the service's log should hold (notes): a problem of the job between its
            `>requirements_failed<` markers.

    Returns:
        Whether the image was pushed and tagged.

    Raises:
        MLTrainingError: never: every problem is told to the reporter, and the result is False.
    """
    from vdk.plugin.ml_training.ops import cs_build

    return cs_build.build_as_builder(argv, environ, reporter)


def launch_execution(
    execution_id: str,
    attempt_id: str,
    job_name: str,
    team: str | None,
    arguments: str | None,
    job_path: str | Path,
    configuration: ConfigurationLike | None = None,
    *,
    reporter: Reporter | None = None,
) -> LaunchOutcome:
    """The launcher: `vdk run` of the job in the Control Service's data-job pod. It starts the execution's run
    with the pod's credentials (or re-attaches to the one an earlier attempt started) and follows it to its end
    or to the launcher's deadline.

    Args:
        execution_id: the execution's id (vdk's EXECUTION_ID: the run is named after it).
        attempt_id: the attempt's id (vdk's ATTEMPT_ID: the launcher pod's name).
        job_name: the job's name.
        team: the job's team.
        arguments: the execution's `--arguments` (JSON: [ml-training] keys for its run).
        job_path: the directory vdk was given (in the job's image, its code layer's is read).
        configuration: VDK's configuration (the Control Service's vdkOptions).
        reporter: told each step (notes), rank 0's lines (`log_line`) and each failed container (`rank_failed`).

    Returns:
        A `LaunchOutcome`: the status the Control Service reads from the termination message, the run, why, and
        the run as followed to its end (None when it was not).

    Raises:
        MLTrainingError: never: every problem is the outcome's (the user's or the platform's error).
            KeyboardInterrupt (the pod stopped): the run goes on, or is deleted when the execution was cancelled.
    """
    from vdk.plugin.ml_training.ops import cs_launch

    return cs_launch.launch_execution(
        execution_id, attempt_id, job_name, team, arguments, Path(job_path), configuration, reporter
    )
