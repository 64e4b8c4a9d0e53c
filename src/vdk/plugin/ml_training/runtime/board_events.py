"""TensorBoard event files of the run's series (runtime/series.py), written by tensorboardX into the run's output
directory: `<output dir>/vdk-tensorboard/`, one run per directory. A sweep's trials each have their own output
directory (`trial-N/` of the sweep's on a cluster), so they are sibling runs of one TensorBoard, each with its
values as hparams and the sweep's metric as the hparams' metric.

The series are named apart from a script's own (`vdk/loss`, `vdk/metrics/eval_loss`, `vdk/gpu/...`), in a
directory of their own: a script that logs to TensorBoard keeps its files and tags as they were.

Why tensorboardX: it is the maintained writer of the format that needs no TensorBoard (torch.utils.tensorboard
needs the `tensorboard` package, its server and plugins included); the plugin depends on it, so local full runs
have it, and a job's image gets it (with protobuf; numpy when the image has none) when its runs keep an output
directory (image/layer_inputs.py). Imported on the series' thread, when the first points come.
Without an output directory (a cluster run without output_pvc: what it writes goes with its pods) no event file
is written; VDK_ML_TRAINING_TENSORBOARD=0 turns them off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.series import LOSS
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts
from vdk.plugin.ml_training.runtime.series import metric_series
from vdk.plugin.ml_training.vocabulary import wire

BOARD_DIR = "vdk-tensorboard"  # in the run's output directory
TAG_PREFIX = "vdk/"
WRITER_PACKAGE = "tensorboardX"
FLUSH_SECONDS = 10  # tensorboardX's own thread writes the file at least this often


def tag(series: str) -> str:
    """The TensorBoard tag of a series: `vdk/loss`."""
    return TAG_PREFIX + series


class BoardWriter:
    """The event files of one run in `directory`, with the trial's values as hparams (a sweep's trial)."""

    name = "TensorBoard's event files"

    def __init__(self, directory: str, facts: RunFacts, err: Any = None):
        self.directory = directory
        self.facts = facts
        self._err = err
        self._writer: Any = None

    def _open(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter

            os.makedirs(self.directory, exist_ok=True)
            self._writer = SummaryWriter(self.directory, flush_secs=FLUSH_SECONDS)
            if self.facts.params:
                self._hparams(start=True)
        return self._writer

    def _hparams(self, start: bool) -> None:
        from tensorboardX.summary import hparams

        values = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in self.facts.params.items()}
        metric = tag(LOSS if self.facts.metric in ("", LOSS) else metric_series(self.facts.metric))
        experiment, start_info, end_info = hparams(values, {metric: 0.0})
        file_writer = self._writer._get_file_writer()
        for summary in (experiment, start_info) if start else (end_info,):
            file_writer.add_summary(summary)

    def write(self, points: list[Point]) -> None:
        writer = self._open()
        for point in points:
            writer.add_scalar(tag(point.series), point.value, point.step, walltime=point.wall)

    def close(self, status: str) -> None:
        if self._writer is None:
            return
        if self.facts.params and status == protocol.FINISHED:
            self._hparams(start=False)
        self._writer.close()


def board_dir(output_dir: str) -> str:
    return os.path.join(output_dir, BOARD_DIR)


def start(facts: RunFacts, env: Mapping[str, str] | None = None, err: Any = None) -> BoardWriter | None:
    """The writer of this run's event files, when it has an output directory and they are not turned off; says
    in one line why there are none when tensorboardX is missing."""
    env = os.environ if env is None else env
    output = env.get(protocol.OUTPUT_DIR)
    if not output or protocol.SWITCH_VALUES.get((env.get(protocol.TENSORBOARD) or "").strip().lower(), True) is False:
        return None
    import importlib.util

    if importlib.util.find_spec(WRITER_PACKAGE) is None:
        (err or sys.stderr).write(
            wire.warning(
                f"no TensorBoard event files for this run: {WRITER_PACKAGE} is not installed where it runs "
                f"(deploy again with vdk-ml-training {_plugin_version()} to have it in the image, or add "
                f"{WRITER_PACKAGE} to requirements.txt; {protocol.TENSORBOARD}=0 says nothing)"
            )
            + "\n"
        )
        return None
    return BoardWriter(board_dir(output), facts, err)


def _plugin_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(wire.PROJECT)
    except metadata.PackageNotFoundError:
        return "(this version)"
