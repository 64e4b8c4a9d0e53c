"""VDK hook implementations of vdk-ml-training. Only hooks live here; the logic is in plain modules."""
from __future__ import annotations

from vdk.api.plugin.hook_markers import hookimpl
from vdk.plugin.ml_training.settings import CONFIG_KEYS


@hookimpl
def vdk_configure(config_builder) -> None:
    for key, (default, description) in CONFIG_KEYS.items():
        config_builder.add(key=key, default_value=default, show_default_value=True, description=description)


@hookimpl
def vdk_command_line(root_command) -> None:
    """deploy (and list, show, execute, delete) for ML jobs; wraps the Control Service CLI's
    commands when it is installed (its hook is tryfirst, so they exist by now)."""
    from vdk.plugin.ml_training.cli.commands import install_all

    install_all(root_command)
