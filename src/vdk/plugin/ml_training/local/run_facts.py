"""A full local run's facts for its TensorBoard and MLflow series (layout.facts_env): its directory's name as its
name, the job directory's commit, its datasets."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vdk.plugin.ml_training.job.model import MLJobSpec


def full_run_facts(spec: MLJobSpec, run_name: str) -> dict[str, str]:
    """The environment that tells a full run's ranks who they are (run, job, commit, datasets)."""
    from vdk.plugin.ml_training import layout
    from vdk.plugin.ml_training.source.audit import collect  # git and the job's files: only for a full run

    provenance = collect(spec.job_dir)
    datasets = {d.target: d.source for d in spec.data}
    return layout.facts_env(spec, run_name, "", provenance.git_commit, provenance.git_dirty, datasets)
