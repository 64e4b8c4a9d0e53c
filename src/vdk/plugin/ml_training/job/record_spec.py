"""A spec read back from what `MLJobSpec.to_dict()` wrote into a run record: how a sweep's best trial becomes a
full run of the same image without its job directory (`vdk execute --start --trial best`). The job directory
is not recorded: the spec's `job_dir` is a placeholder named after the job, never read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.model import Accelerators
from vdk.plugin.ml_training.job.model import DataMount
from vdk.plugin.ml_training.job.model import Entrypoint
from vdk.plugin.ml_training.job.model import MLJobSpec
from vdk.plugin.ml_training.job.model import NodeRange
from vdk.plugin.ml_training.job.model import SecretEnv
from vdk.plugin.ml_training.job.sweep import SweepSpec
from vdk.plugin.ml_training.job.sweep_grammar import parse_parameter


def spec_from_record(data: dict[str, Any]) -> MLJobSpec:
    """The spec a record holds (`to_dict()` of it); MLTrainingError when it is not one."""
    try:
        return _spec(dict(data))
    except (KeyError, TypeError, ValueError) as e:
        raise MLTrainingError(
            f"the run record's spec cannot be read back ({type(e).__name__}: {e})",
            "deploy the job again from its directory with this vdk; its new runs' records can be read",
        ) from None


def _spec(data: dict[str, Any]) -> MLJobSpec:
    fields = {f.name for f in dataclasses.fields(MLJobSpec)}
    entry = str(data["entrypoint"])
    low, _, high = str(data["nodes"]).partition(":")
    gpus = str(data["gpus_per_node"])
    values = {k: v for k, v in data.items() if k in fields}
    values.update(
        job_dir=Path(data["name"]),
        entrypoint=Entrypoint(entry[3:], True) if entry.startswith("-m ") else Entrypoint(entry),
        nodes=NodeRange(int(low), int(high or low)),
        gpus_per_node=Accelerators(int(gpus)) if gpus.isdigit() else Accelerators(1, gpus),
        args=tuple(data["args"]),
        smoke_args=None if data.get("smoke_args") is None else tuple(data["smoke_args"]),
        base_provides=tuple(data.get("base_provides") or ()),
        env=tuple((str(k), str(v)) for k, v in (data.get("env") or {}).items()),
        mounts=tuple(DataMount(**m) for m in data.get("mounts") or ()),
        secrets=tuple(SecretEnv(**s) for s in data.get("secrets") or ()),
        sweep=_sweep(data.get("sweep")),
    )
    return MLJobSpec(**values)


def _sweep(data: dict[str, Any] | None) -> SweepSpec | None:
    if not data:
        return None
    parameters = tuple(parse_parameter(name, text) for name, text in data["parameters"].items())
    settings = {k: v for k, v in data.items() if k != "parameters"}
    return SweepSpec(parameters=parameters, **settings)
