"""A failure inside a framework that wraps `main` is summarised as a plain script's is: the user's exception
and line (Hydra's @hydra.main catches it, prints it and exits with 1), the arguments a parser built on argparse
refused (jsonargparse under Lightning CLI). Real Hydra and Lightning, through the real `vdk run`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import smoke_run

pytestmark = pytest.mark.slow

# the frameworks come from vdk's environment (hydra-core and jsonargparse: setup.cfg's dev extras; lightning:
# the Makefile), not from an index
ML = "requirements_overlay = false\nsmoke_steps = 2\n"

HYDRA = """
import hydra
import torch
from omegaconf import DictConfig


def build_model(width: int) -> torch.nn.Module:
    if width > 8:
        raise ValueError(f"width {width} is more than the 8 features of the data")
    return torch.nn.Linear(width, 1)


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(cfg: DictConfig) -> None:
    model = build_model(cfg.get("width", 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    main()
"""

LIGHTNING_CLI = """
import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, width: int = 8):
        super().__init__()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if x.shape[1] != self.layer.in_features:
            raise ValueError(f"the data has {x.shape[1]} features, the model takes {self.layer.in_features}")
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(L.LightningDataModule):
    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)


if __name__ == "__main__":
    defaults = {"accelerator": "gpu", "devices": 1, "max_epochs": 2, "enable_progress_bar": False}
    LightningCLI(Regressor, Data, trainer_defaults=defaults)
"""


def failed_run(job: Path) -> str:
    """What `vdk run JOB` said, having failed."""
    done = smoke_run(job, timeout=400)
    assert done.returncode != 0, done.stdout
    return done.stdout


def summary_traceback(out: str) -> str:
    """The traceback of the summary (after its headline), not what the framework printed before it."""
    return out[out.index("smoke run FAILED") :]


def line_of(job: Path, text: str) -> int:
    return next(i for i, line in enumerate((job / "train.py").read_text().splitlines(), 1) if text in line)


def test_an_error_hydra_caught_is_summarised_with_the_user_s_exception_and_line(tmp_path):
    job = write_job(tmp_path, "hydra", ml=ML, files={"train.py": HYDRA, "requirements.txt": "hydra-core\n"})
    out = failed_run(job)
    summary = summary_traceback(out)
    assert "rank 0 failed: ValueError: width 16 is more than the 8 features of the data" in summary, out
    assert "the script exited with 1" not in out
    frames = re.findall(r'File "([^"]+)", line (\d+)', summary)
    train = str(job / "train.py")
    assert frames[0] == (train, str(line_of(job, "model = build_model(")))  # from the user's first frame
    assert (train, str(line_of(job, "raise ValueError"))) in frames
    assert "Fix: fix the error in the traceback above (rank 0)" in out


def test_lightning_cli_arguments_its_parser_refused_are_summarised_with_its_message(tmp_path):
    files = {"train.py": LIGHTNING_CLI, "requirements.txt": "lightning\njsonargparse[signatures]\n"}
    job = write_job(tmp_path, "cli-arguments", ml=ML + "args = fit --model.width=wide\n", files=files)
    out = failed_run(job)
    summary = summary_traceback(out)
    assert re.search(r'rank 0 failed: train.py .*fit: error: Parser key "model.width":', summary), out
    assert "Expected a <class 'int'>. Got value: wide" in summary
    assert "the script exited with 2" not in out and "Traceback" not in summary
    assert f"`args = fit --model.width=wide` in [ml-training] of {job / 'config.ini'}" in out


def test_lightning_cli_training_errors_are_summarised_with_the_user_s_line(tmp_path):
    files = {"train.py": LIGHTNING_CLI, "requirements.txt": "lightning\njsonargparse[signatures]\n"}
    job = write_job(tmp_path, "cli-training", ml=ML + "args = fit --model.width=4\n", files=files)
    out = failed_run(job)
    summary = summary_traceback(out)
    assert "rank 0 failed: ValueError: the data has 8 features, the model takes 4" in summary, out
    assert f'File "{job / "train.py"}", line {line_of(job, "raise ValueError")}' in summary
