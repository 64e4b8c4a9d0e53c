"""`vdk show --board` and `vdk show --dashboard` (ops/boards.py): TensorBoard over the chosen runs, Optuna's
dashboard over a sweep's study, each on a loopback port; its address printed (with -o json, one object), then it
serves until Ctrl-C (or SIGTERM, SIGHUP), which stops it: the command then ends well."""

from __future__ import annotations

import click

from vdk.plugin.ml_training.cli.cluster_scope import print_json
from vdk.plugin.ml_training.cli.cluster_scope import stderr
from vdk.plugin.ml_training.ops.scope import Scope


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
    from vdk.plugin.ml_training.ops import boards

    as_json = (output or "text").lower() == "json"
    if board == dashboard:
        raise click.UsageError("`vdk show` takes one of --board (TensorBoard) and --dashboard (a sweep's study)")
    if dashboard and (last is not None or to is not None):
        raise click.UsageError("--last and --to go with --board")
    if board:
        shown = boards.show_board(scope, (run,) if run else (), last or boards.DEFAULT_LAST, to, say=stderr)
        viewer = shown.viewer
        assert viewer is not None
        if as_json:
            print_json(shown.to_dict())
        else:
            click.echo(f"TensorBoard of {', '.join(shown.runs)}: {viewer.url}")
            click.echo(f"  event files: {shown.folder}")
    else:
        viewer, copy = boards.show_dashboard(scope, run, say=stderr)
        if as_json:
            print_json({**viewer.to_dict(), "study_copy": str(copy)})
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
