"""`vdk show --board` and `vdk show --dashboard` (`api.show_board`, `api.show_dashboard`): TensorBoard over the chosen
runs, Optuna's dashboard over a sweep's study, each on a loopback port; its address printed (with -o json, one
object), then it serves until Ctrl-C (or SIGTERM, SIGHUP), which stops it: the command then ends well."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.cli.console import Console

if TYPE_CHECKING:
    from vdk.plugin.ml_training.api import Scope

DEFAULT_LAST = 5  # api.show_board's


def show_viewer(
    scope: Scope,
    run: str | None,
    board: bool,
    dashboard: bool,
    last: int | None,
    to: str | None,
    output: str | None,
) -> None:
    from vdk.plugin.ml_training.errors import MLTrainingError

    as_json = (output or "text").lower() == "json"
    if board == dashboard:
        raise click.UsageError("`vdk show` takes one of --board (TensorBoard) and --dashboard (a sweep's study)")
    if dashboard and (last is not None or to is not None):
        raise click.UsageError("--last and --to go with --board")
    if board:
        shown = api.show_board(scope, (run,) if run else (), last or DEFAULT_LAST, to, reporter=Console())
        viewer = shown.viewer
        assert viewer is not None
        if as_json:
            print_json(shown.to_dict())
        else:
            click.echo(f"TensorBoard of {', '.join(shown.runs)}: {viewer.url}")
            click.echo(f"  event files: {shown.folder}")
    else:
        dashboard_ = api.show_dashboard(scope, run, reporter=Console())
        viewer = dashboard_.viewer
        if as_json:
            print_json(dashboard_.to_dict())
        else:
            click.echo(f"Optuna Dashboard of {viewer.what}: {viewer.url}")
    stderr("Serving on this machine only (loopback); Ctrl-C stops it.")
    try:
        code = viewer.wait()
    except KeyboardInterrupt:
        viewer.stop()
        stderr(f"{viewer.kind.name} stopped.")
        return
    viewer.stop()
    if code != 0:
        raise MLTrainingError(
            f"{viewer.kind.name} ended by itself (exit status {code}); its output is in {viewer.log}",
            "run the same `vdk show` again",
        )
