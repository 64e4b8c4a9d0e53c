"""The smoke check runs the code after the training loop (issue 33, point 1): after the cut epoch the script leaves
its training loop as if its last epoch had just ended, so a final save, a test evaluation or an export that would
crash on the cluster after every GPU-hour is spent fails here, at the user's line; the summary names what ran after
training (a save that raised is not counted), and says what did not run where the loop is not the job's own."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk_run

pytestmark = pytest.mark.slow

EPOCH_LOOP = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    def main():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        train = DataLoader(TensorDataset(torch.randn(512, 8), torch.randn(512, 1)), batch_size=16, shuffle=True)
        test = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
        for epoch in range(20):
            for x, y in train:
                loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch} done")
        model.eval()
        with torch.no_grad():
            total = sum(nn.functional.mse_loss(model(x.cuda()), y.cuda()).item() for x, y in test)
        print(f"test loss {total:.3f}")
        torch.save(model.state_dict(), FINAL)
        print("final model saved")

    if __name__ == "__main__":
        main()
"""


def job(root: Path, name: str, script: str, ml: str = "smoke_steps = 2", files: dict[str, str] | None = None) -> Path:
    return write_job(root, name, ml=ml, files={"train.py": textwrap.dedent(script), **(files or {})})


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_final_save_into_a_missing_directory_fails_at_its_line_and_a_correct_one_passes_and_is_named(tmp_path):
    broken = job(tmp_path, "final-save", EPOCH_LOOP.replace("FINAL", '"final/model.pt"'))
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "rank 0 failed: RuntimeError: Parent directory final does not exist." in result.output
    save = line_of(broken / "train.py", "torch.save(")
    assert f'File "{broken / "train.py"}", line {save}, in main' in result.output
    loop = line_of(broken / "train.py", "for epoch in range")
    # the test evaluation ran; the save that raised is not counted as done
    assert (
        f"end of training: the script left its training loop (train.py:{loop}) after its first epoch, "
        "then evaluation (2 batches)\n" in result.output
    )
    assert "epoch 0 done" in result.output and "epoch 1 done" not in result.output

    fixed = job(tmp_path, "final-save-fixed", EPOCH_LOOP.replace("FINAL", '"model.pt"'))
    result = vdk_run(fixed)
    assert result.exit_code == 0, result.output
    assert "test loss" in result.output and "final model saved" in result.output
    assert (
        f"end of training: the script left its training loop (train.py:{loop}) after its first epoch, "
        "then evaluation (2 batches), 1 save\n" in result.output
    )
    # the resume check's first start was stopped as a preemption stops it (it wrote nothing to resume from): the
    # ranks started again for the end of training
    assert "the first start wrote nothing in its working directory to resume from" in result.output


LIBRARY_LOOP = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    # a training loop the job does not hold in its own files (a library's fit(), here code compiled from a string)
    FIT = '''
    def fit(model, optimizer, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
    '''
    namespace = {"nn": nn}
    exec(compile(FIT, "<library>", "exec"), namespace)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace["fit"](model, optimizer, DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1))), 5)
    print("never reached in the smoke run")
"""


def test_a_training_loop_outside_the_jobs_code_is_said_not_left_and_what_covers_it(tmp_path):
    result = vdk_run(job(tmp_path, "library-loop", LIBRARY_LOOP, files={"requirements.txt": "torch\n"}))
    assert result.exit_code == 0, result.output
    assert "never reached in the smoke run" not in result.output
    said = re.search(r"end of training: (the code after .*)", result.output)
    assert said is not None, result.output
    assert said.group(1).startswith("the code after the training loop did not run: the training loop is not in the ")
    assert "smoke_args that make the script train a single epoch (e.g. `--epochs 1`)" in said.group(1)


LIGHTNING = """
    import torch
    import lightning as L
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)
        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)
        def test_step(self, batch, i):
            x, y = batch
            self.log("test_loss", nn.functional.mse_loss(self.net(x), y))
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def data(n):
        return DataLoader(TensorDataset(torch.randn(n, 4), torch.randn(n, 1)), batch_size=8)

    if __name__ == "__main__":
        trainer = L.Trainer(max_epochs=5, accelerator="gpu", devices=1, enable_progress_bar=False, logger=False)
        model = Model()
        trainer.fit(model, data(128))
        trainer.test(model, data(64))
        trainer.save_checkpoint("final/model.ckpt")
        metrics = trainer.callback_metrics
        print("test loss", float(metrics[METRIC]))
"""


def test_lightning_tests_and_saves_after_fit_returned_after_its_first_epoch(tmp_path):
    files = {"requirements.txt": "lightning\n"}
    broken = job(tmp_path, "lightning-after", LIGHTNING.replace("METRIC", "'test_acc'"), files=files)
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "rank 0 failed: KeyError: 'test_acc'" in result.output
    assert f"line {line_of(broken / 'train.py', 'float(metrics[')}" in result.output
    after = "end of training: Lightning's fit() returned after its first epoch, then test (2 batches), 1 save\n"
    assert after in result.output

    fixed = job(tmp_path, "lightning-fixed", LIGHTNING.replace("METRIC", "'test_loss'"), files=files)
    result = vdk_run(fixed)
    assert result.exit_code == 0, result.output
    assert "test loss" in result.output and after in result.output


NO_DATALOADER = """
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1000):  # at module level, batches made on the fly
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(model.state_dict(), "final/model.pt")
"""


def test_a_loop_without_a_dataloader_is_left_after_smoke_steps_and_the_code_after_it_runs(tmp_path):
    result = vdk_run(job(tmp_path, "no-dataloader", NO_DATALOADER, "smoke_steps = 2\ngpus_per_node = 0"))
    assert result.exit_code != 0
    assert "rank 0 failed: RuntimeError: Parent directory final does not exist." in result.output
    assert "end of training: the script left its training loop (train.py:6) after smoke_steps steps\n" in result.output
