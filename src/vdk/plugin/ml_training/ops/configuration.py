"""VDK configuration for use cases called from Python (a notebook, a CI step), where no `vdk` command built
one: the plugin's keys from the environment as VDK reads them (VDK_ML_TRAINING_REGISTRY, ...). Settings
come from it, else from [vdk] of the job's config.ini (job/settings.py)."""

from __future__ import annotations

import os
from typing import Any

from vdk.plugin.ml_training.job.settings import ConfigurationLike
from vdk.plugin.ml_training.job.settings import variable


class EnvironmentConfiguration:
    """The environment as VDK's configuration: VDK_<KEY>, else <KEY> (upper case); unset keys are defaults."""

    def get_value(self, key: str) -> Any:
        for name in (variable(key), key.upper()):
            if name in os.environ:
                return os.environ[name]
        return None

    def is_default(self, key: str) -> bool:
        return self.get_value(key) is None


def or_environment(configuration: ConfigurationLike | None) -> ConfigurationLike:
    """`configuration`, else the environment's."""
    return configuration if configuration is not None else EnvironmentConfiguration()
