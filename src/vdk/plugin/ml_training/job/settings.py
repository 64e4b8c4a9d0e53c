"""The plugin's VDK configuration keys (each also settable as env VDK_<KEY>, or in [vdk] of a job's config.ini):
which exist (`CONFIG_KEYS`, derived from the catalogue, keys.py), and how a verb reads them, the same way for
every verb (`setting`, `job_settings`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Protocol

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import keys
from vdk.plugin.ml_training.job.config_file import JobConfig
from vdk.plugin.ml_training.job.config_file import closest
from vdk.plugin.ml_training.job.config_file import job_config
from vdk.plugin.ml_training.vocabulary.wire import setting_variable

RUN_MODE = keys.key("run_mode").setting_name
CONTAINER_MODE = "container"  # the smoke run, in the job's image
RUN_MODES = ("smoke", "full", CONTAINER_MODE)
CONTAINER_ENGINE = keys.key("container_engine").setting_name
CONTAINER_RUN_OPTIONS = keys.key("container_run_options").setting_name

# key -> (default, description); job-level overrides in [ml-training] drop the "ml_training_" prefix.
CONFIG_KEYS: dict[str, tuple[Any, str]] = {
    key.setting_name: (key.setting_default, key.setting_description) for key in keys.settings()
}
# Settings of the `vdk` command itself, not of a job: not passed to load_job_spec.
_NOT_JOB_SETTINGS = tuple(key.setting_name for key in keys.settings() if key.scope == keys.VDK)


class ConfigurationLike(Protocol):
    def get_value(self, key: str) -> Any: ...


# Where a setting came from, as messages name it.
FROM_ENVIRONMENT = "environment"
FROM_JOB_VDK_SECTION = "[vdk] of the job's config.ini"


class Settings(dict):
    """Settings keyed as in [ml-training] (`registry`, `namespace`, ...), and where each came from:
    `origins[key]` names the environment variable or the [vdk] line a value was read from."""

    def __init__(self, values: dict[str, Any] | None = None, origins: dict[str, str] | None = None):
        super().__init__(values or {})
        self.origins: dict[str, str] = dict(origins or {})

    def origin(self, key: str) -> str:
        name = keys.SETTING_PREFIX + key
        return self.origins.get(key) or f"VDK configuration {name} ({setting_variable(name)})"


def variable(key: str) -> str:
    """The environment variable of a VDK configuration key."""
    return setting_variable(key)


def job_vdk_section(job: Path | JobConfig | None) -> dict[str, str]:
    """The plugin's keys in [vdk] of a job's config.ini (`ml_training_*`, lower-cased as VDK reads them); an
    unknown `ml_training_*` key there is an error (VDK would ignore it silently), and so is one spelt like a key of
    the plugin with its prefix misspelt (`ml_trainig_registry`). `job`: the job directory, or its config.ini read
    already."""
    if job is None:
        return {}
    config = job_config(job)
    out: dict[str, str] = {}
    for section in config.parser.sections():
        if section.lower() != "vdk":
            continue
        for name, value in config.parser.items(section):
            key = name.strip().lower()
            if not key.startswith(keys.SETTING_PREFIX) and not key.startswith(keys.SETTING_PREFIX.replace("_", "-")):
                meant = difflib.get_close_matches(key.replace("-", "_"), list(CONFIG_KEYS), n=1, cutoff=0.85)
                if meant:  # another plugin's keys are not near ours: this one is ours, misspelt
                    raise JobConfigError(
                        config.path,
                        f"unknown VDK configuration key {name!r}",
                        f"did you mean `{meant[0]}`?",
                        section,
                        name,
                    )
                continue
            key = key.replace("-", "_")
            if key not in CONFIG_KEYS:
                close = closest(key, list(CONFIG_KEYS))
                fix = f"did you mean `{close}`?" if close else f"the plugin's keys are: {', '.join(CONFIG_KEYS)}"
                raise JobConfigError(config.path, f"unknown VDK configuration key {name!r}", fix, section, name)
            out[key] = value
    return out


def setting(
    configuration: ConfigurationLike | None,
    key: str,
    job: Path | JobConfig | None = None,
    section: Mapping[str, str] | None = None,
) -> tuple[Any, str | None]:
    """(value, where it came from) of one VDK configuration key of the plugin, the same way for every verb: the
    environment (VDK_<KEY>), else [vdk] of the job's config.ini, else the key's default (origin None). An empty
    value counts as not set. VDK itself loads [vdk] only for `vdk run JOB`, under the environment; it is read
    here for every verb that knows its job directory (`job`, or its config.ini read already; `section`: its
    [vdk] keys taken already, as a spec carries them, and then config.ini is not read)."""
    found = dict(section) if section is not None else job_vdk_section(job)
    return _setting(configuration, key, found, _directory(job))


def _directory(job: Path | JobConfig | None) -> Path | None:
    return job.job_dir if isinstance(job, JobConfig) else job


def _setting(
    configuration: ConfigurationLike | None, key: str, section: dict[str, str], job_dir: Path | None
) -> tuple[Any, str | None]:
    default = CONFIG_KEYS[key][0]
    value = configuration.get_value(key) if configuration is not None else None
    explicit = value is not None and str(value).strip() != "" and not _is_default(configuration, key, value)
    if explicit:
        env = variable(key)
        if _from_environment(key, value):
            return value, env
        if key in section and str(section[key]).strip() == str(value).strip():
            return value, f"[vdk] {key} of {Path(job_dir or '.') / 'config.ini'}"
        return value, f"VDK configuration {key}"
    if str(section.get(key) or "").strip():
        return section[key].strip(), f"[vdk] {key} of {Path(job_dir or '.') / 'config.ini'}"
    return default, None


def _is_default(configuration: Any, key: str, value: Any) -> bool:
    """Whether VDK's value of `key` is its default (no provider set it)."""
    is_default = getattr(configuration, "is_default", None)
    if callable(is_default):
        return bool(is_default(key))
    return value == CONFIG_KEYS[key][0]


def _from_environment(key: str, value: Any) -> bool:
    """VDK reads a key from VDK_<KEY>, else <KEY> (upper case)."""
    for name in (variable(key), key.upper()):
        if name in os.environ:
            return str(os.environ[name]).strip() == str(value).strip()
    return False


def job_settings(configuration: ConfigurationLike | None, job: Path | JobConfig | None = None) -> Settings:
    """Cluster-wide defaults for `load_job_spec`, keyed as in [ml-training] (see `setting` for the precedence;
    the job's [ml-training] keys win over all of them). `job`: the job directory, or its config.ini read already."""
    section = job_vdk_section(job)
    out = Settings()
    for key in CONFIG_KEYS:
        if key in _NOT_JOB_SETTINGS:
            continue
        value, origin = _setting(configuration, key, section, _directory(job))
        if value is not None and str(value).strip() != "":
            short = key.removeprefix(keys.SETTING_PREFIX)
            out[short] = value
            if origin is not None:
                out.origins[short] = origin
    return out
