"""What the dependency layer installs (image/dependency_layer.py builds it): the job's requirements.txt, the
tools of the data step (boto3, huggingface_hub: datafetch.DATA_TOOLS) when config.ini references such data,
resolved with it by uv, and what the plugin copies in beside them (`extra_requirements`: the GPU sampler's NVML
binding; a sweep's Optuna and the TensorBoard event files' writer: image/plugin_packages.py)."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.datafetch import DATA_TOOLS
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.plugin_packages import BOARD_PACKAGES
from vdk.plugin.ml_training.image.plugin_packages import SWEEP_PACKAGES
from vdk.plugin.ml_training.image.plugin_packages import plugin_requirements
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS
from vdk.plugin.ml_training.source.requirements import RequirementsFile

# NVIDIA's NVML binding, for the GPU sampler of the job's nodes (runtime/gpu_sampler.py): installed with the
# plugin, and copied into the layer when the job asks for GPUs and samples them, unless the base or
# requirements.txt has it (pynvml, the older wrapper, depends on it).
NVML_BINDING = "nvidia-ml-py"
_NVML_NAMES = {"nvidia-ml-py", "pynvml"}
BOARD_WRITER = "tensorboardx"  # the canonical name of BOARD_PACKAGES' writer


def extra_requirements(spec: MLJobSpec, base: BaseInfo) -> tuple[str, ...]:
    """What the layer holds beyond requirements.txt (`name==version`): the NVML binding, when the job's GPUs are
    sampled and nothing else provides it."""
    if not spec.gpus_per_node.count or not spec.gpu_sample_period_seconds:
        return ()
    if _NVML_NAMES & set(base.provides):
        return ()
    if _NVML_NAMES & set(RequirementsFile.read(requirements_file(spec)).names):
        return ()
    from importlib import metadata

    try:
        return (f"{NVML_BINDING}=={metadata.version(NVML_BINDING)}",)
    except metadata.PackageNotFoundError:  # an installation without it: the sampler stays off in the image
        return ()


def writes_event_files(spec: MLJobSpec) -> bool:
    """Whether the job's runs write TensorBoard event files in its image: they keep an output directory (output_pvc:
    without one, what a run writes goes with its pods), and the files are not turned off."""
    env = dict(spec.env)
    switch = (env.get(protocol.TENSORBOARD) or "").strip().lower()
    series = (env.get(protocol.SERIES_SECONDS) or "").strip()
    if not spec.output_pvc or protocol.SWITCH_VALUES.get(switch, True) is False:
        return False
    try:
        return float(series or 1) != 0
    except ValueError:
        return True


def requirements_file(spec: MLJobSpec) -> Path | None:
    """The job's requirements.txt if it asks for anything, with what the plugin's code in its pods needs
    (image/plugin_packages.py): a sweep's packages, the event files' writer unless the job names it itself."""
    own = path if (path := spec.job_dir / REQUIREMENTS).is_file() and RequirementsFile.read(path).lines else None
    packages: tuple[str, ...] = SWEEP_PACKAGES if spec.sweep is not None else ()
    if writes_event_files(spec) and not (own and BOARD_WRITER in RequirementsFile.read(own).names):
        packages += BOARD_PACKAGES
    return plugin_requirements(own, packages, REQUIREMENTS) if packages else own


def data_tools(spec: MLJobSpec) -> list[str]:
    """The requirements of the data step for the schemes the job's datasets use (none for claims)."""
    schemes = sorted({d.scheme for d in spec.data if d.fetched})
    return [line for scheme in schemes for line in DATA_TOOLS.get(scheme, ())]


def layer_input(spec: MLJobSpec) -> bytes | None:
    """What the layer installs, as bytes (its cache key's): requirements.txt, then the data step's tools; None
    when there is nothing to install."""
    requirements = requirements_file(spec)
    tools = data_tools(spec)
    if requirements is None and not tools:
        return None
    text = requirements.read_bytes() if requirements is not None else b""
    return text + (b"\n# the data step\n" + "\n".join(tools).encode() + b"\n" if tools else b"")
