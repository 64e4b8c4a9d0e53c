"""What the dependency layer installs (image/dependency_layer.py builds it): the job's requirements.txt, the
tools of the data step (boto3, huggingface_hub: datafetch.DATA_TOOLS) when config.ini references such data,
resolved with it by uv, and what the plugin copies in beside them (`extra_requirements`: the GPU sampler's NVML
binding; a sweep's Optuna: image/sweep_packages.py)."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.datafetch import DATA_TOOLS
from vdk.plugin.ml_training.image.base_facts import BaseInfo
from vdk.plugin.ml_training.image.sweep_packages import sweep_requirements
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.source.requirements import REQUIREMENTS
from vdk.plugin.ml_training.source.requirements import RequirementsFile

# NVIDIA's NVML binding, for the GPU sampler of the job's nodes (runtime/gpu_sampler.py): installed with the
# plugin, and copied into the layer when the job asks for GPUs and samples them, unless the base or
# requirements.txt has it (pynvml, the older wrapper, depends on it).
NVML_BINDING = "nvidia-ml-py"
_NVML_NAMES = {"nvidia-ml-py", "pynvml"}


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


def requirements_file(spec: MLJobSpec) -> Path | None:
    """The job's requirements.txt if it asks for anything (a sweep's job: with its packages, sweep_packages.py)."""
    own = path if (path := spec.job_dir / REQUIREMENTS).is_file() and RequirementsFile.read(path).lines else None
    return own if spec.sweep is None else sweep_requirements(own, REQUIREMENTS)


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
