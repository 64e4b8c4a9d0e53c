"""VDK hook implementations of vdk-ml-training. Only hooks live here; the logic is in plain modules."""
from __future__ import annotations

from vdk.api.plugin.hook_markers import hookimpl
from vdk.plugin.ml_training.settings import CONFIG_KEYS


@hookimpl
def vdk_configure(config_builder) -> None:
    for key, (default, description) in CONFIG_KEYS.items():
        config_builder.add(key=key, default_value=default, show_default_value=True, description=description)
