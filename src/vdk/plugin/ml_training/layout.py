"""Where things live inside a job image, and how it starts. Shared by the image builder and the
manifest renderers, so that the command a manifest runs finds what the image put there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.runtime.gpu_sampler import SamplerSettings
from vdk.plugin.ml_training.runtime.series import RunFacts
from vdk.plugin.ml_training.runtime.series import facts_environment
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings

ROOT = "/opt/vdk-ml"
JOB_DIR = f"{ROOT}/job"  # the job directory (code layer); the working directory
DEPS_DIR = f"{ROOT}/deps"  # the job's requirements.txt, installed for the base image's Python
OUTPUT_DIR = f"{ROOT}/outputs"  # the run's directory of its output claim, when it has one: the working directory
LIB_DIR = f"{ROOT}/lib"  # the plugin's packages the pods run (vdk/plugin/ml_training/{runtime,datafetch,vocabulary})
DATA_CACHE_DIR = f"{ROOT}/data-cache"  # the data cache (data_cache_pvc, or the pod's own) in the data step
PYTHONPATH = f"{DEPS_DIR}:{LIB_DIR}"
BOOTSTRAP_MODULE = "vdk.plugin.ml_training.runtime.bootstrap"
BOOTSTRAP_PATH = f"{LIB_DIR}/{BOOTSTRAP_MODULE.replace('.', '/')}.py"  # the same, as a file in the image
# torch's launcher (torch.distributed.run) whose agents leave the exit barrier together: what every pod starts
LAUNCHER_MODULE = "vdk.plugin.ml_training.runtime.torchrun_launch"


@dataclass(frozen=True)
class JobImage:
    """A job image as manifests run it: its reference, and the interpreter its base has."""

    reference: str  # registry/repo@sha256:... (registry/repo:tag in a dry run)
    python: str  # what the launch command starts: a name on the image's PATH (`python3`) or an absolute path


def working_dir(spec: MLJobSpec) -> str:
    """Where a cluster run's processes work: the run's directory of its output claim, else the image's job
    directory. Relative targets of [ml-training.data] are below it."""
    return OUTPUT_DIR if spec.output_pvc else JOB_DIR


def launch_env(spec: MLJobSpec) -> dict[str, str]:
    """The environment every training container of the job is started with, on a cluster and in a
    container run: [ml-training.env] plus what the image layout needs (a user PYTHONPATH goes after
    ours), the stall watchdog's timeouts and the GPU sampler's settings."""
    user = spec.env_dict
    env = {"PYTHONUNBUFFERED": user.pop("PYTHONUNBUFFERED", "1")}
    extra_path = user.pop("PYTHONPATH", None)
    env["PYTHONPATH"] = f"{PYTHONPATH}:{extra_path}" if extra_path else PYTHONPATH
    env.update(user)
    env.update(watchdog_settings(spec).env())
    env.update(sampler_settings(spec).env())
    return env


def watchdog_settings(spec: MLJobSpec) -> WatchdogSettings:
    """The stall watchdog of the job's training processes (cluster runs and full local runs)."""
    return WatchdogSettings(spec.stall_timeout_seconds, spec.startup_timeout_seconds)


def sampler_settings(spec: MLJobSpec, gpu_count: int | None = None) -> SamplerSettings:
    """The GPU sampler and idle policy of the job's nodes (cluster runs and full local runs; `gpu_count`: the
    GPUs of this machine a full local run uses)."""
    return SamplerSettings(spec.gpu_sample_period_seconds, spec.idle_timeout_seconds, gpu_count)


def launch_command(spec: MLJobSpec, python: str, torchrun_flags: list[str] | tuple[str, ...] = ()) -> list[str]:
    """torch's own launcher (in the runtime's LAUNCHER_MODULE, which makes its exit barrier safe), started by the
    base's interpreter `python`, running the user's entrypoint through the runtime bootstrap.

    Without flags, torchrun takes its layout from the operator's PET_* variables."""
    return [
        python,
        "-m",
        LAUNCHER_MODULE,
        *torchrun_flags,
        "-m",
        BOOTSTRAP_MODULE,
        *spec.command_args(),
    ]


def facts_env(
    spec: MLJobSpec,
    run: str = "",
    image: str = "",
    commit: str | None = None,
    dirty: bool = False,
    datasets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The run's facts for its training processes' viewers (runtime/series.py: TensorBoard's hparams, an MLflow
    run's tags and params): its name in vdk (a local run's is its directory's), the job, team, image, commit,
    datasets and config."""
    config = {
        "entrypoint": spec.entrypoint.target,
        "args": " ".join(spec.args),
        "nodes": str(spec.nodes),
        "procs_per_node": str(spec.procs_per_node),
        "gpus_per_node": str(spec.gpus_per_node),
        "backend": spec.backend,
        "base_image": spec.base_image,
    }
    facts = RunFacts(
        run=run,
        job=spec.name,
        team=spec.team or "",
        image=image,
        commit=commit or "",
        dirty=dirty,
        datasets=dict(datasets or {}),
        config={k: v for k, v in config.items() if v},
    )
    return facts_environment(facts)
