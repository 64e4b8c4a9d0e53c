"""VDK configuration keys of the plugin (each also settable as env VDK_<KEY>)."""

from __future__ import annotations

from typing import Any
from typing import Protocol

from vdk.plugin.ml_training.job import DEFAULT_SMOKE_TIMEOUT
from vdk.plugin.ml_training.job import DEFAULT_STALL_TIMEOUT
from vdk.plugin.ml_training.job import DEFAULT_STARTUP_TIMEOUT
from vdk.plugin.ml_training.teams import TEAM_NAMESPACES
from vdk.plugin.ml_training.teams import TEAM_QUEUES
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


def job_settings(configuration: ConfigurationLike) -> dict[str, Any]:
    """Cluster-wide defaults for `load_job_spec`, keyed as in [ml-training]."""
    out = {}
    for key in CONFIG_KEYS:
        if key in _NOT_JOB_SETTINGS:
            continue
        value = configuration.get_value(key)
        if value is not None and str(value).strip() != "":
            out[key.removeprefix("ml_training_")] = value
    return out
