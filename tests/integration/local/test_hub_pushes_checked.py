"""A push to the Hugging Face Hub after the training loop runs in the smoke check up to its network call (issue 33,
point 5): the files it would upload are written (a model's save_pretrained, the Trainer's save_model), nothing is
sent, and the summary names the push as checked that far. Real transformers, a tiny GPT-2 from its config."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.slow

MODEL = "GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16))"

MODEL_PUSH = f"""
import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

model = {MODEL}
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = DataLoader(TensorDataset(torch.randint(0, 64, (64, 8))), batch_size=8)
for epoch in range(10):
    for (tokens,) in data:
        loss = model(input_ids=tokens, labels=tokens).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
model.push_to_hub("my-team/tiny-gpt2")
print("pushed", flush=True)
"""

TRAINER_PUSH = f"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (8,))
        return {{"input_ids": ids, "labels": ids}}


args = TrainingArguments("out", num_train_epochs=3, per_device_train_batch_size=8, report_to="none", save_strategy="no")
trainer = Trainer(model={MODEL}, args=args, train_dataset=Tokens())
trainer.train()
trainer.push_to_hub("End of training")
print("pushed", flush=True)
"""


def run(root: Path, name: str, script: str):
    ml = "gpus_per_node = 0\nsmoke_steps = 2\nsmoke_resume = off\n"
    job = write_job(
        root, name, ml=ml, files={"train.py": textwrap.dedent(script), "requirements.txt": "transformers\n"}
    )
    return CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])


@pytest.mark.parametrize(
    ("script", "trained"),
    [
        (MODEL_PUSH, "the script left its training loop (train.py:9) after its first epoch"),
        (TRAINER_PUSH, "the Hugging Face Trainer's train() returned after smoke_steps steps"),
    ],
    ids=["model", "trainer"],
)
def test_a_push_after_training_is_checked_up_to_the_network_call(tmp_path, script, trained):
    result = run(tmp_path, "hub-push", script)
    assert result.exit_code == 0, result.output
    assert "pushed" in result.output, result.output  # offline, and nothing was sent: it returned
    end = f"end of training: {trained}, then 1 Hub push (checked up to the network call)\n"
    assert end in result.output, result.output  # its save_pretrained / save_model is the push's, not a save
