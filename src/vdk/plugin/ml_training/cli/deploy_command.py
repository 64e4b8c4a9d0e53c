"""`vdk deploy JOB` (or `-p JOB`, or `vdk deploy` in the job's directory, as `vdk run JOB` and `vdk show` take it)
for ml-training jobs: the options, one function of the API (`api.deploy`, its dry run `api.plan_deploy`, or a build
only `api.build`), and its result on stdout: the manifests of `--dry-run`, the image reference of `--build-only`,
the run of a deploy (what changed since the job's last run is said on stderr before it starts), `--if-changed`'s
"nothing changed" (exit 0), or JSON with `-o json`; progress and notes go to stderr (cli/console.py). SIGINT,
SIGTERM and SIGHUP stop it with every process it started (cli/interrupts.py).

Heavy modules (kubernetes, the image builder, torch's launcher) are imported when a deploy runs, not when vdk
starts: every vdk command imports this module.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import diff_views
from vdk.plugin.ml_training.cli import interrupts
from vdk.plugin.ml_training.cli import verbs
from vdk.plugin.ml_training.cli.console import Console
from vdk.plugin.ml_training.cli.context import configuration
from vdk.plugin.ml_training.cli.context import fail
from vdk.plugin.ml_training.cli.context import is_ml_dir
from vdk.plugin.ml_training.cli.context import job_config
from vdk.plugin.ml_training.cli.context import team_option
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import backend_choices
from vdk.plugin.ml_training.job import ml_config_problem
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.overrides import ARGS_OPTION
from vdk.plugin.ml_training.job.overrides import SET_OPTION
from vdk.plugin.ml_training.vocabulary.human_units import counted

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import DeployResult
    from vdk.plugin.ml_training.api import Unchanged
    from vdk.plugin.ml_training.image import PushedImage


def _data_job_operation(kwargs: dict[str, Any]) -> bool:
    """The Control Service CLI's deploy asked for an operation on a deployed data job (by -n: --show, --remove,
    --update, --enable, --disable): `vdk deploy` with one of them, in an ml-training job's directory, is meant for
    that data job, not for the directory's."""
    return kwargs.get("operation") not in (None, "create") or kwargs.get("enabled") is not None


def job_directory(kwargs: dict[str, Any]) -> str | None:
    """The job a deploy is about: -p, else JOB (the positional argument, as `vdk run JOB` takes it), else the
    directory it runs in when that is an ml-training job's (or one meant as such: its problem is then said), unless
    a Control Service operation on a deployed data job was asked. None: no job."""
    option, argument = kwargs.get("job_path"), kwargs.get("job_directory")
    if option and argument and Path(option).resolve() != Path(argument).resolve():
        raise click.UsageError(f"the job is given twice, as -p {option} and as {argument}: give it once")
    if option or argument:
        return option or argument
    if _data_job_operation(kwargs):
        return None
    here = Path.cwd()
    return str(here) if is_ml_dir(here) or ml_config_problem(here) is not None else None


def _is_ml(kwargs: dict[str, Any]) -> bool:
    path = job_directory(kwargs)
    if not path or is_ml_dir(path):
        return bool(path)
    problem = ml_config_problem(Path(path))  # meant as ml-training, but broken or misnamed
    if problem is not None:
        fail(problem)
    return False


def _not_ml_reason(kwargs: dict[str, Any]) -> str:
    path = job_directory(kwargs)
    if not path:
        return (
            "Missing the job to deploy: `vdk deploy JOB` (its directory, or -p JOB), or `vdk deploy` inside the "
            "job's directory."
        )
    return f"{path} is not an ml-training job (its config.ini has no `[job] type = ml-training`)."


def deploy_ml(
    job_path: str | None,
    name: str | None,
    team: str | None,
    reason: str | None,
    output: str | None,
    dry_run: bool,
    skip_smoke: bool,
    build_only: bool,
    backend: str | None,
    skip_import_check: bool = False,
    set_values: tuple[str, ...] = (),
    ml_args: str | None = None,
    follow: bool = False,
    if_changed: bool = False,
    rest_api_url: str | None = None,
    job_directory: str | None = None,
) -> None:
    from vdk.plugin.ml_training.cli import service_deploy

    as_json = (output or "text").lower() == "json"
    job_path = job_path or job_directory or str(Path.cwd())  # -p, JOB, or the job directory it runs in
    try:
        if dry_run and build_only:
            raise MLTrainingError(
                "--dry-run and --build-only exclude each other",
                "use --dry-run to see what would be built and started (no cluster is contacted), "
                "or --build-only to build and push the image",
            )
        if follow and (dry_run or build_only or as_json):
            what = "--dry-run" if dry_run else "--build-only" if build_only else "-o json"
            raise MLTrainingError(
                f"--follow follows the run a deploy starts, as text; {what} starts none or prints JSON",
                f"leave out {what} to follow the run, or --follow to get {what}'s result",
            )
        if if_changed and (dry_run or build_only):
            raise MLTrainingError(
                f"--if-changed decides whether to start a run; {'--dry-run' if dry_run else '--build-only'} starts "
                "none",
                "drop one of them",
            )
        option, default_team = team_option(team)
        overrides = api.parse_overrides(set_values or (), ml_args)
        spec = api.deploy_spec(
            job_config(job_path),  # read once: deciding it is for ML read it already
            name=name,
            team=option,
            default_team=default_team,
            backend=backend,
            import_check=not skip_import_check,
            configuration=configuration(),
            overrides=overrides,
        )
        console = Console(runs_err=True)  # everything on stderr: stdout is the deploy's result
        route = api.service_route(job_config(job_path), spec.team, rest_api_url, configuration())  # read once
        if dry_run:
            click.echo(api.plan_deploy(spec, reason=reason, reporter=console).to_yaml(), nl=False)
            if route.endpoint is not None:
                service_deploy.print_setup(spec, route)
            return
        if route.through:
            arguments = {**overrides, **({"backend": backend} if backend else {})}
            if if_changed:
                arguments["if_changed"] = "true"
            service_deploy.deploy_through_service(
                spec, route, reason=reason, skip_smoke=skip_smoke, build_only=build_only, arguments=arguments,
                as_json=as_json, follow=follow, reporter=console,
            )  # fmt: skip
            return
        if route.endpoint is not None:
            console.note(f"note: deploying to Kubernetes directly, not through the VDK Control Service: {route.why}")
        result: DeployResult | Unchanged | None = None
        with interrupts.stop_on_signals():
            try:
                if build_only:
                    _built(spec, api.build(spec, skip_smoke=skip_smoke, reporter=console), as_json)
                else:
                    result = api.deploy(
                        spec, reason=reason, skip_smoke=skip_smoke, if_changed=if_changed, reporter=console
                    )
                    _started(result, default_team, as_json, follow)
            except KeyboardInterrupt as e:  # SIGINT, SIGTERM, SIGHUP: what was started is stopped already
                interrupts.exit_interrupted(e, f"vdk deploy interrupted by {interrupts.as_interrupted(e).name}.")
        if follow and result is not None and result.started:  # --if-changed that started nothing: nothing to follow
            _follow(result, default_team)
    except MLTrainingError as e:
        fail(e)


def _built(spec: MLJobSpec, image: PushedImage, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(image.to_dict(), indent=2))
        return
    click.echo(
        f"Built {spec.name}: {counted(len(image.dependencies), 'dependency')}, {counted(len(image.layers), 'layer')}",
        err=True,
    )
    click.echo(image.reference)


def _started(result: DeployResult | Unchanged, default_team: str | None, as_json: bool, follow: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    if not result.started:
        click.echo(diff_views.unchanged_text(result))
        return
    plan = result.plan
    spec, run, target = plan.spec, plan.run, plan.target
    lines = [
        f"Started run {run.name} of {spec.name} ({target.backend}, namespace {target.namespace}): {_shape(spec)}",
        f"  image   {result.image.reference}",
        f"  created {', '.join(result.created)}",
    ]
    if not follow:
        lines.append(_follow_hint(spec, default_team))
    click.echo("\n".join(lines))


def _shape(spec: MLJobSpec) -> str:
    """What the run holds: `sweep: 8 trials, 2 at a time, each on 1 node with 1 GPU`, or `2 nodes with 8 GPUs
    each, 8 processes per node`."""
    if spec.sweep is not None:
        return spec.sweep_text()
    nodes = f"{spec.nodes} node{'s' if spec.nodes.max != 1 else ''}"
    each = " each" if spec.nodes.max != 1 else ""
    return f"{nodes} with {spec.gpus_per_node.describe()}{each}, {counted(spec.procs_per_node, 'process')} per node"


def _again(spec: MLJobSpec, default_team: str | None) -> str:
    """`-n JOB [-t TEAM]` of the commands that work on the run: -t unless its team is the default team."""
    label = teams.normalise(spec.team) if spec.team else ""
    team = "" if teams.same_team(spec.team, default_team) else f" -t {shlex.quote(label)}"
    return f"-n {spec.name}{team}"


def _follow_hint(spec: MLJobSpec, default_team: str | None) -> str:
    """How to follow the run."""
    again = _again(spec, default_team)
    return f"Follow it:  vdk show {again}      logs of every rank:  vdk execute --logs {again}"


def _follow(result: DeployResult, default_team: str | None) -> None:
    """`--follow`: the run the deploy started, to its end; the exit status is its outcome."""
    from vdk.plugin.ml_training.cli.cluster_follow import follow_and_exit

    follow_and_exit(
        lambda console: api.follow_deployed(result, reporter=console),
        result.plan.run.name,
        _again(result.plan.spec, default_team),
    )


DEPLOY = verbs.Verb(
    name="deploy",
    help="Deploy an ml-training job: smoke check, build and push its image, start it on Kubernetes.",
    ml_help=(
        "ml-training jobs (config.ini `[job] type = ml-training`): `vdk deploy JOB` (or -p JOB, or `vdk deploy` in "
        "the job's directory) runs the smoke check, builds "
        "and pushes the job's image, and starts distributed training on Kubernetes. --dry-run prints the "
        "manifests and contacts no cluster (a base image's registry once, to learn its Python and packages); "
        "--build-only pushes the image and prints its reference; --follow follows the run to its end. "
        "--set KEY=VALUE and --args TEXT override [ml-training] keys for this run. With a VDK Control Service set up "
        "for ml-training (its URL set), the deploy goes through it instead: the job's files uploaded, its image "
        "built by the service's builder, an execution started; `vdk execute --logs` shows its run."
    ),
    params=[
        click.Option(
            ["-p", "--job-path"],
            type=click.Path(exists=True, file_okay=False, dir_okay=True, resolve_path=True),
            help="Path to the job directory.",
        ),
        click.Argument(
            ["job_directory"],
            required=False,
            metavar="[JOB]",
            type=click.Path(exists=True, file_okay=False, dir_okay=True, resolve_path=True),
        ),
        click.Option(["-n", "--name"], help="The job name [the job directory's name]."),
        click.Option(
            ["-t", "--team"],
            help="The team the job belongs to [[owner] team of config.ini, else your default team: `vdk set-default`]",
        ),
        click.Option(["-r", "--reason"], help="Why this deploy: kept in the run's audit trail."),
        click.Option(
            ["-o", "--output"],
            type=click.Choice(["text", "json"], case_sensitive=False),
            default="text",
            help="Format of the result on stdout.",
        ),
        click.Option(
            ["--dry-run"],
            is_flag=True,
            help="ml-training: print the manifests (YAML) and the image plan; contacts no cluster and no registry, "
            "except once the registry of a base image whose Python and packages are not known yet.",
        ),
        click.Option(["--skip-smoke"], is_flag=True, help="ml-training: do not run the smoke check first."),
        click.Option(
            ["--skip-import-check"],
            is_flag=True,
            help="ml-training: do not check first that the image has every module the job imports.",
        ),
        click.Option(
            ["--build-only"],
            is_flag=True,
            help="ml-training: build and push the image, print its reference, start nothing.",
        ),
        click.Option(
            ["--if-changed"],
            is_flag=True,
            help="ml-training: start a run only if the code, requirements, config, base image or a dataset changed "
            "since the job's last successful run and no run of the job that has not ended yet is the same; else "
            "start nothing and exit 0. Concurrent invocations start one run (they take turns with a Lease).",
        ),
        click.Option(
            ["--backend"],
            type=click.Choice(list(backend_choices()), case_sensitive=False),
            help="ml-training: override `backend` of [ml-training] (auto, pytorchjob, trainjob, job).",
        ),
        click.Option(
            ["--follow"],
            is_flag=True,
            help="ml-training: once the run started, follow it to its end: rank 0's output and the last lines of any "
            "rank that fails; the exit status is the run's outcome. Ctrl-C detaches (the run goes on).",
        ),
        click.Option(
            [SET_OPTION, "set_values"],
            multiple=True,
            metavar="KEY=VALUE",
            help="ml-training: a key of [ml-training] for this run only, e.g. --set nodes=4 (repeatable); the run's "
            "record keeps it, config.ini is not changed.",
        ),
        click.Option(
            [ARGS_OPTION, "ml_args"],
            metavar="TEXT",
            help='ml-training: the entrypoint\'s arguments for this run, instead of `args` (--args "--lr 1e-3").',
        ),
        click.Option(
            ["-u", "--rest-api-url"],
            help="The VDK Control Service's REST API URL [$VDK_CONTROL_SERVICE_REST_API_URL, else `vdk set-default "
            "-u`]. ml-training: a deploy goes through it when its operator set it up for ml-training.",
        ),
    ],
    ml_only=(
        "job_directory",
        "dry_run",
        "skip_smoke",
        "build_only",
        "backend",
        "skip_import_check",
        "set_values",
        "ml_args",
        "follow",
        "if_changed",
    ),  # fmt: skip
    is_ml=_is_ml,
    run_ml=deploy_ml,
    not_ml_reason=_not_ml_reason,
)
