"""`vdk execute ... --trial N|best` of a sweep: `--logs` the log of the pod that ran the trial, `--start` the trial
as a normal run of the same image with its values (`--nodes N`). One function of the API each (`api.trial_log`,
`api.start_trial`); text or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import say_started
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.console import Console

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Scope


def run(
    scope: Scope,
    operation: str,
    trial: str,
    execution_id: str | None,
    nodes: int | None,
    reason: str | None,
    as_json: bool,
    follow: bool,
    force: bool = False,
) -> None:
    if follow:
        raise click.UsageError("--trial shows a trial's log as it is now; follow the whole sweep with --follow alone")
    if operation == "logs":
        _logs(scope, trial, execution_id, as_json)
    else:
        _start(scope, trial, execution_id, nodes, reason, as_json, force)


def _logs(scope: Scope, trial: str, execution_id: str | None, as_json: bool) -> None:
    log = api.trial_log(scope, trial, execution_id, reporter=Console())
    if as_json:
        print_json(log.to_dict())
        return
    if log.text is None:
        stderr(f"[trial {log.trial.number}] no log: {log.why}")
        return
    stderr(f"Trial {log.trial.number} of {log.run.name} ({log.trial.state}), pod {log.pod}:")
    click.echo("".join(f"[trial {log.trial.number}] {line}\n" for line in log.text.splitlines()), nl=False)


def _start(
    scope: Scope,
    trial: str,
    execution_id: str | None,
    nodes: int | None,
    reason: str | None,
    as_json: bool,
    force: bool = False,
) -> None:
    from vdk.plugin.ml_training.cli.sweep_views import number
    from vdk.plugin.ml_training.cli.sweep_views import params_text

    started = api.start_trial(
        scope, trial, run_id=execution_id, nodes=nodes, reason=reason, force=force, reporter=Console()
    )
    if as_json:
        print_json(started.to_dict())
        return
    what = (
        f"trial {started.trial.number} of the sweep {started.sweep.name} ({params_text(started.trial.params)}; "
        f"its metric {number(started.trial.metric)}), {started.nodes} node{'' if started.nodes == '1' else 's'}, "
        f"{started.backend}, "
        f"namespace {started.selection.client.namespace}"
    )
    say_started(started.selection, started.run_name, what, started.image)
