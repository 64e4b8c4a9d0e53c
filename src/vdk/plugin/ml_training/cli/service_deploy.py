"""`vdk deploy -p JOB` through the VDK Control Service (ops/cs_deploy.py): its result on stdout (the execution
started and its run, or JSON), its progress on stderr; `--follow` prints the execution's log until it ends, and
exits with its outcome; `--dry-run` adds what the Control Service's set-up lacks (ops/cs_setup.py) to the plan."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli import interrupts

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import MLJobSpec
    from vdk.plugin.ml_training.api import ServiceDeployResult
    from vdk.plugin.ml_training.api import ServiceRoute
    from vdk.plugin.ml_training.cli.console import Console


def deploy_through_service(
    spec: MLJobSpec,
    route: ServiceRoute,
    *,
    reason: str | None,
    skip_smoke: bool,
    build_only: bool,
    arguments: dict[str, str],
    as_json: bool,
    follow: bool,
    reporter: Console,
) -> None:
    reporter.note(f"Through the VDK Control Service: {route.why}")
    with interrupts.stop_on_signals():
        try:
            result = api.deploy_through_service(
                spec, route, reason=reason, skip_smoke=skip_smoke, start=not build_only, arguments=arguments,
                reporter=reporter,
            )  # fmt: skip
        except KeyboardInterrupt as e:
            interrupts.exit_interrupted(
                e,
                f"vdk deploy interrupted by {interrupts.as_interrupted(e).name}: what the Control Service was sent "
                f"goes on there (`vdk show -n {spec.name} -t {shlex.quote(spec.team or '')}` says what it has)",
            )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    click.echo(_result_text(result, follow))
    if follow and result.started:
        _follow(route, result, reporter)


def _again(result: ServiceDeployResult) -> str:
    return f"-n {result.job_name} -t {shlex.quote(result.team)}"


def _result_text(result: ServiceDeployResult, follow: bool) -> str:
    version = f"version {result.version[:12]} ({result.entry})"
    lines = [f"Deployed {result.job_name} through the VDK Control Service at {result.url}: {version}"]
    if result.schedule:
        lines.append(f"  schedule  {result.schedule} (each tick is an execution that starts a run)")
    if not result.started:
        lines.append(f"  no execution started (--build-only): start one with `vdk execute --start {_again(result)}`")
        return "\n".join(lines)
    lines.append(f"Started execution {result.execution}: it starts run {result.run} on the cluster")
    if not follow:
        lines.append(f"Follow it:  vdk execute --logs {_again(result)} -i {result.execution}      "
                     f"its state:  vdk execute --show {_again(result)} -i {result.execution}")  # fmt: skip
    return "\n".join(lines)


def _follow(route: ServiceRoute, result: ServiceDeployResult, reporter: Console) -> None:
    assert result.execution is not None
    click.echo(f"Following execution {result.execution} (Ctrl-C detaches; it goes on)", err=True)
    try:
        with interrupts.stop_on_signals():
            state = api.follow_execution(route, result.team, result.job_name, result.execution, reporter=reporter)
    except KeyboardInterrupt as e:
        interrupts.exit_interrupted(
            e,
            f"\nDetached from execution {result.execution}; it goes on.\n"
            f"  its log:    vdk execute --logs {_again(result)} -i {result.execution}\n"
            f"  cancel it:  vdk execute --cancel {_again(result)} -i {result.execution}",
        )
    status = str(state.get("status") or "")
    message = f": {state['message']}" if state.get("message") else ""
    click.echo(f"Execution {result.execution} {status}{message}", err=True)
    raise click.exceptions.Exit(0 if status == "succeeded" else 1)


def print_setup(spec: MLJobSpec, route: ServiceRoute) -> None:
    """The dry run's account of the Control Service's set-up for ml-training: each check, what is missing, the fix."""
    checks = api.check_service_setup(spec, route)
    click.echo(f"VDK Control Service set-up for ml-training ({'used' if route.through else 'not used'}: {route.why}):",
               err=True)  # fmt: skip
    for check in checks:
        mark = {True: "ok     ", False: "MISSING", None: "unknown"}[check.ok]
        click.echo(f"  {mark} {check.what}" + (f": {check.detail}" if check.detail else ""), err=True)
        if check.ok is not True and check.fix:
            click.echo(f"          Fix: {check.fix}", err=True)
