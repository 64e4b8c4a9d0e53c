"""A local run's datasets in its working directory: each relative target of [ml-training.data] made a link to the
local files that stand for it (`smoke_data`, a bounded sample, or the whole dataset for a full run; fetched by
ops/data_samples.py), so that the code reads `./data/train` locally as it does on the cluster. Absolute targets
(`/data`) are not made on this machine: the code reads the user's own copy there, or nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError


@dataclass(frozen=True)
class LocalDataset:
    """The local files of one dataset of a run: `path` at `target`, and what they are, for the run's summary."""

    target: str
    path: Path
    what: str  # "smoke_data samples/train", "a sample of s3://...: 20 of more files, 3.1 MB (smoke_sample_files)"

    def line(self) -> str:
        return f"data {self.target}: {self.what}"


def link_datasets(work_dir: Path, datasets: tuple[LocalDataset, ...]) -> None:
    """Each dataset linked at its target below the working directory (what the job's files have there is
    replaced: the image's dataset takes its place on the cluster too)."""
    for dataset in datasets:
        link = work_dir / dataset.target
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.is_dir():
                _remove_tree(link)
            os.symlink(dataset.path.resolve(), link, target_is_directory=True)
        except OSError as e:
            raise MLTrainingError(
                f"cannot put the data of {dataset.target} in the working directory {work_dir}: {e}",
                "check that the run directory's disk has room and that the data's path can be read",
            ) from None


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
