"""A preempted run picks up where it left off, with no change to its script: real Hugging Face Trainer, Lightning and
Accelerate scripts train locally (a full run: torchrun, 2 ranks on the CPU, DDP over gloo), are told to stop mid-run
by SIGTERM to torchrun's agent (as the kubelet tells a pod's first process), save a checkpoint at the end of the step
and end; started again in the same working directory (as a restarted pod finds its output volume), they resume at the
next step and the loss goes on from where it was. Tiny models, synthetic data; each step sleeps a little so that the
SIGTERM lands mid-run."""

from __future__ import annotations

import io
import os
import re
import signal
import textwrap
import threading
import time

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launcher import HostStarter
from vdk.plugin.ml_training.local.launcher import launch
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.runtime import lineage

pytestmark = pytest.mark.slow

# y = the sum of x's 8 features: a loss that falls fast from ~8; 256 examples, 16 a step and a rank: 8 steps an epoch
DATA = """
import time
import torch
from torch.utils.data import TensorDataset

def dataset():
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, x.sum(dim=1, keepdim=True))

def net():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 1)
"""

TRAINER = (
    DATA
    + """
from transformers import Trainer, TrainerCallback, TrainingArguments

class Pairs(torch.utils.data.Dataset):
    def __init__(self):
        self.data = dataset()
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        x, y = self.data[i]
        return {"x": x, "labels": y}

class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = net()
    def forward(self, x, labels=None):
        return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

class Report(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and "loss" in (logs or {}):
            print(f"step {state.global_step} loss {logs['loss']:.5f}", flush=True)
        time.sleep(0.1)

if __name__ == "__main__":
    args = TrainingArguments(output_dir="out", num_train_epochs=3, per_device_train_batch_size=16, learning_rate=0.1,
                             logging_steps=1, save_strategy="epoch", report_to="none", disable_tqdm=True)
    Trainer(model=Regressor(), args=args, train_dataset=Pairs(), callbacks=[Report()]).train()
"""
)

LIGHTNING = (
    DATA
    + """
import lightning as L
from torch.utils.data import DataLoader

class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = net()
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.global_rank == 0:
            print(f"step {self.global_step + 1} loss {loss.item():.5f}", flush=True)
        time.sleep(0.1)
        return loss
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.1)

if __name__ == "__main__":
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=3, logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), DataLoader(dataset(), batch_size=16, shuffle=True))
"""
)

ACCELERATE = (
    DATA
    + """
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from torch.utils.data import DataLoader

if __name__ == "__main__":
    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir="run", automatic_checkpoint_naming=True))
    model = net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    loader = DataLoader(dataset(), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if accelerator.is_main_process:
                state = next(iter(optimizer.state.values()))
                print(f"step {int(state['step'])} loss {loss.item():.5f}", flush=True)
            time.sleep(0.1)
        accelerator.save_state()  # the script's own checkpoint, every epoch
"""
)

SCRIPTS = {lineage.TRANSFORMERS: TRAINER, lineage.LIGHTNING: LIGHTNING, lineage.ACCELERATE: ACCELERATE}
STEP = re.compile(r"^step (\d+) loss ([0-9.]+)$", re.M)
SAVED = re.compile(r"\[vdk-ml-training\] stop: checkpoint (\S+) \(step (\d+)\) written on the way out")
STEPS = 24  # 3 epochs of 8 steps
STOP_AT = 12  # told to stop once rank 0 printed this step: mid-way through the second epoch


class Output(io.StringIO):
    """What the run's ranks print, read by the test while the run goes on."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            return super().write(text)

    def text(self):
        with self.lock:
            return self.getvalue()


class KeepsTheAgent(HostStarter):
    def start(self, attempt):
        self.agent = super().start(attempt)
        return self.agent


def stopped_mid_run(plan):
    """The run, told to stop (SIGTERM to torchrun's agent) once rank 0 printed step STOP_AT; and its output."""
    starter, out, ended = KeepsTheAgent(), Output(), {}
    thread = threading.Thread(target=lambda: ended.update(run=launch(plan, out, out, starter)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 240
    while not any(int(s) >= STOP_AT for s, _ in STEP.findall(out.text())) and thread.is_alive():
        assert time.monotonic() < deadline, out.text()[-3000:]
        time.sleep(0.05)
    os.kill(starter.agent.pid, signal.SIGTERM)
    thread.join(timeout=240)
    return ended["run"], out.text()


def mean(points):
    return sum(loss for _, loss in points) / len(points)


def losses(text):
    return [(int(step), float(loss)) for step, loss in STEP.findall(text)]


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_a_run_told_to_stop_saves_on_the_way_out_and_its_restart_goes_on_at_the_next_step(tmp_path, framework):
    files = {"train.py": textwrap.dedent(SCRIPTS[framework])}
    job = write_job(tmp_path, f"resume-{framework}", ml="gpus_per_node = 0\nprocs_per_node = 2\n", files=files)
    plan = full_plan(load_job_spec(job), gpus=0)

    first, said = stopped_mid_run(plan)
    saved = SAVED.search(said)
    assert saved is not None, said[-3000:]
    checkpoint, stopped_at = saved.group(1), int(saved.group(2))
    before = losses(said)
    assert STOP_AT <= stopped_at < STEPS and before[-1][0] == stopped_at  # the step under way, then the save
    assert "SIGTERM: the checkpoint is written at the end of the current step" in said
    assert not analyse(first).passed  # it ended as a stopped pod ends, not as a finished run

    out = Output()
    second = launch(plan, out, out, again=first)
    after = losses(out.text())
    assert f"[vdk-ml-training] resume: resumed from {checkpoint} (step {stopped_at}" in out.text(), out.text()[-3000:]
    assert after and after[0][0] == stopped_at + 1 and after[-1][0] == STEPS, out.text()[-3000:]  # on to the end
    assert analyse(second).passed
    # the loss goes on from where it was, not from the untrained model's (a few steps: one batch's loss is noisy)
    assert mean(after[:4]) < 0.6 * mean(before[:4])
    assert second.work == first.work  # the same working directory, with what the first start wrote
