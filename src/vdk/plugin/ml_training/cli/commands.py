"""Every verb the plugin adds to (or wraps in) the `vdk` command line."""

from __future__ import annotations

import click

from vdk.plugin.ml_training.cli import verbs


def ml_verbs() -> list[verbs.Verb]:
    # The verb modules import kubernetes, the image builder and torch's launcher only when a verb
    # runs: `vdk_command_line` runs for every vdk command, `vdk run` included.
    from vdk.plugin.ml_training.cli.cluster_runs import VERBS as RUN_VERBS
    from vdk.plugin.ml_training.cli.deploy_command import DEPLOY
    from vdk.plugin.ml_training.cli.diff_command import DIFF

    return [DEPLOY, *RUN_VERBS, DIFF]


def install_all(root: click.Group) -> None:
    from vdk.plugin.ml_training.cli import defaults

    for verb in ml_verbs():
        verbs.install(root, verb)
    defaults.install(root)
