"""Every verb the plugin adds to (or wraps in) the `vdk` command line."""

from __future__ import annotations

import inspect

import click

from vdk.plugin.ml_training.cli import verbs


def ml_verbs() -> list[verbs.Verb]:
    # The verb modules import kubernetes, the image builder and torch's launcher only when a verb
    # runs: `vdk_command_line` runs for every vdk command, `vdk run` included.
    from vdk.plugin.ml_training.cli.delete_command import DELETE
    from vdk.plugin.ml_training.cli.deploy_command import DEPLOY
    from vdk.plugin.ml_training.cli.diff_command import DIFF
    from vdk.plugin.ml_training.cli.execute_command import EXECUTE
    from vdk.plugin.ml_training.cli.list_command import LIST
    from vdk.plugin.ml_training.cli.show_command import SHOW

    return [DEPLOY, LIST, SHOW, DELETE, EXECUTE, DIFF]


ROOT_HELP = """

ML training jobs (config.ini `[job] type = ml-training`): unmodified PyTorch / Hugging Face training code.

\b
# Smoke-check a training job on this machine's CPU, in seconds
vdk run my-job
# Build its image and start distributed training on Kubernetes
vdk deploy -p my-job
# Its runs: ranks, why they wait or failed, progress; every rank's logs
vdk show -n my-job
vdk execute --logs -n my-job"""


def install_all(root: click.Group) -> None:
    from vdk.plugin.ml_training.cli import defaults

    for verb in ml_verbs():
        verbs.install(root, verb)
    defaults.install(root)
    if root.help is not None and ROOT_HELP not in root.help:
        root.help = inspect.cleandoc(root.help) + ROOT_HELP
