"""`vdk set-default -t TEAM` and `vdk reset-default -t` when the Control Service CLI, which has them, is
not installed. They write the same file as its commands (`teams.defaults_path`), so the default team is
the same with or without it."""

from __future__ import annotations

import click

from vdk.plugin.ml_training import api
from vdk.plugin.ml_training.cli.context import fail
from vdk.plugin.ml_training.errors import MLTrainingError


def _set_default(team: str | None) -> None:
    if team is None:
        current = api.default_team()
        click.echo(f"Default team: {current}" if current else "No default team is set (`vdk set-default -t TEAM`).")
        return
    try:
        path = api.set_default_team(team)
    except MLTrainingError as e:
        fail(e)
    click.echo(f"Default team set to {team.strip()} (in {path}).")


def _reset_default(team: bool) -> None:
    if team:
        api.set_default_team(None)
        click.echo("Default team reset.")


SET_DEFAULT = click.Command(
    "set-default",
    params=[click.Option(["-t", "--team"], help="The default team of the commands that take -t.")],
    callback=_set_default,
    help="Set the default team that `vdk list/show/execute/delete/deploy` use when -t is not given.",
)
RESET_DEFAULT = click.Command(
    "reset-default",
    params=[click.Option(["-t", "--team"], is_flag=True, help="Reset the default team.")],
    callback=_reset_default,
    help="Reset the default team.",
)


def install(root: click.Group) -> None:
    """Add the commands unless they exist (the Control Service CLI's own, added first)."""
    for command in (SET_DEFAULT, RESET_DEFAULT):
        if command.name not in root.commands:
            root.add_command(command)
