"""VDK configuration keys of the plugin (each also settable as env VDK_<KEY>)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from typing import Protocol

from vdk.plugin.ml_training.job import DEFAULT_SMOKE_TIMEOUT
from vdk.plugin.ml_training.job import DEFAULT_STALL_TIMEOUT
from vdk.plugin.ml_training.job import DEFAULT_STARTUP_TIMEOUT
from vdk.plugin.ml_training.job.teams import TEAM_NAMESPACES
from vdk.plugin.ml_training.job.teams import TEAM_QUEUES
from vdk.plugin.ml_training.units import format_duration

RUN_MODE = "ml_training_run_mode"
CONTAINER_MODE = "container"  # the smoke run, in the job's image
RUN_MODES = ("smoke", "full", CONTAINER_MODE)
CONTAINER_ENGINE = "ml_training_container_engine"
CONTAINER_RUN_OPTIONS = "ml_training_container_run_options"
# Settings of the `vdk` command itself, not of a job ([ml-training] has no such keys).
_NOT_JOB_SETTINGS = (RUN_MODE, CONTAINER_ENGINE, CONTAINER_RUN_OPTIONS)

# key -> (default, description); job-level overrides in [ml-training] drop the "ml_training_" prefix.
CONFIG_KEYS: dict[str, tuple[Any, str]] = {
    "ml_training_registry": (
        None,
        "OCI registry (and path) that ml-training job images are pushed to, e.g. registry.example.com/ml",
    ),
    "ml_training_namespace": (None, "Kubernetes namespace for ml-training jobs [the kube context's namespace]"),
    "ml_training_kube_context": (None, "kubeconfig context for ml-training jobs [the current context]"),
    TEAM_NAMESPACES: (
        None,
        "each team's Kubernetes namespace, e.g. `vision:ml-vision, nlp:ml-nlp` (a job's `namespace` key wins; "
        "teams without an entry use ml_training_namespace)",
    ),
    TEAM_QUEUES: (
        None,
        "each team's Kueue local queue, e.g. `vision:vision-gpus, nlp:nlp-gpus` (a job's `queue` key wins)",
    ),
    "ml_training_output_pvc": (
        None,
        "PersistentVolumeClaim that holds cluster runs' outputs: a directory per run, the run's working directory",
    ),
    "ml_training_base_image": (None, "default base image (Python + torch) for ml-training jobs"),
    # A text default: VDK converts an environment value to the default's type, and "10m" is no int.
    "ml_training_smoke_timeout": (
        format_duration(DEFAULT_SMOKE_TIMEOUT),
        "seconds (or 10m, 1h) after which a smoke run is stopped",
    ),
    "ml_training_stall_timeout": (
        format_duration(DEFAULT_STALL_TIMEOUT),
        "a rank of a cluster or full local run with no optimizer step for this long is stopped (0: never)",
    ),
    "ml_training_startup_timeout": (
        format_duration(DEFAULT_STARTUP_TIMEOUT),
        "the same for the first optimizer step of a rank (0: never)",
    ),
    RUN_MODE: (
        "smoke",
        "`vdk run` of an ml-training job: smoke (a few optimizer steps on CPU), full (to completion) or "
        "container (the smoke run inside the job's image)",
    ),
    CONTAINER_ENGINE: (
        None,
        "`vdk run --container`: the container engine's command, with global options [podman, else docker]",
    ),
    CONTAINER_RUN_OPTIONS: (None, "`vdk run --container`: options added to the engine's `run`, e.g. --network host"),
}


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
        return self.origins.get(key) or f"VDK configuration ml_training_{key} (VDK_ML_TRAINING_{key.upper()})"


def variable(key: str) -> str:
    """The environment variable of a VDK configuration key."""
    return f"VDK_{key.upper()}"


def job_vdk_section(job_dir: Path | None) -> dict[str, str]:
    """The plugin's keys in [vdk] of a job's config.ini (`ml_training_*`, lower-cased as VDK reads them); an
    unknown `ml_training_*` key there is an error (VDK would ignore it silently)."""
    if job_dir is None:
        return {}
    from vdk.plugin.ml_training.errors import JobConfigError
    from vdk.plugin.ml_training.job import CONFIG_FILE
    from vdk.plugin.ml_training.job import closest
    from vdk.plugin.ml_training.job import read_config

    parser = read_config(job_dir)
    out: dict[str, str] = {}
    for section in parser.sections():
        if section.lower() != "vdk":
            continue
        for name, value in parser.items(section):
            key = name.strip().lower()
            if not key.startswith("ml_training_") and not key.startswith("ml-training-"):
                continue
            key = key.replace("-", "_")
            if key not in CONFIG_KEYS:
                close = closest(key, list(CONFIG_KEYS))
                fix = f"did you mean `{close}`?" if close else f"the plugin's keys are: {', '.join(CONFIG_KEYS)}"
                raise JobConfigError(
                    Path(job_dir) / CONFIG_FILE, f"unknown VDK configuration key {name!r}", fix, section, name
                )
            out[key] = value
    return out


def setting(configuration: ConfigurationLike | None, key: str, job_dir: Path | None = None) -> tuple[Any, str | None]:
    """(value, where it came from) of one VDK configuration key of the plugin, the same way for every verb: the
    environment (VDK_<KEY>), else [vdk] of the job's config.ini, else the key's default (origin None). An empty
    value counts as not set. VDK itself loads [vdk] only for `vdk run JOB`, under the environment; it is read
    here for every verb that knows its job directory."""
    return _setting(configuration, key, job_vdk_section(job_dir), job_dir)


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


def job_settings(configuration: ConfigurationLike | None, job_dir: Path | None = None) -> Settings:
    """Cluster-wide defaults for `load_job_spec`, keyed as in [ml-training] (see `setting` for the precedence;
    the job's [ml-training] keys win over all of them)."""
    section = job_vdk_section(job_dir)
    out = Settings()
    for key in CONFIG_KEYS:
        if key in _NOT_JOB_SETTINGS:
            continue
        value, origin = _setting(configuration, key, section, job_dir)
        if value is not None and str(value).strip() != "":
            short = key.removeprefix("ml_training_")
            out[short] = value
            if origin is not None:
                out.origins[short] = origin
    return out
