"""What the smoke run's summary says is what ran (issue 33, point 5): the loss shown is the loss the script computes,
not the one Accelerate divides by its gradient accumulation steps before backward(); mixed precision the smoke run
turns off is named as not checked for Accelerate and Lightning as for the Trainer; and a pass over a DataLoader
without a forward pass in eval mode is not an evaluation."""

from __future__ import annotations

import re
import textwrap

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.slow

ACCUMULATING = """
    import torch
    from accelerate import Accelerator
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator(gradient_accumulation_steps=2, mixed_precision="bf16")
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1) * 10), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(3):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                print(f"loss {loss.item()!r}", flush=True)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        for x, y in loader:  # counts its batches: no forward pass, not an evaluation
            pass
"""


def test_accelerates_accumulated_loss_is_shown_as_the_script_computes_it_and_bf16_named_not_checked(tmp_path):
    path = write_job(
        tmp_path,
        "accumulating",
        ml="gpus_per_node = 0\nsmoke_steps = 2\nsmoke_resume = off",  # one start: the summary is this test's
        files={"train.py": textwrap.dedent(ACCUMULATING), "requirements.txt": "accelerate\n"},
    )
    out = CliEntryBasedTestRunner(plugin).invoke(["run", str(path)]).output
    assert "smoke run PASSED" in out, out
    printed = [float(x) for x in re.findall(r"^loss (\S+)$", out, re.MULTILINE)]
    # the first epoch, cut to 2 batches, goes on to its second step (accumulation: a step per 2 batches); its third
    # batch is the loader's last, where Accelerate steps on it alone; the second epoch's first step ends training
    assert len(printed) == 5, out
    shown = float(re.search(r"rank 0: 2 steps, last loss (\S+),", out).group(1))
    assert shown == pytest.approx(printed[2], rel=1e-3)  # as the script computes it: not divided by 2
    assert shown != pytest.approx(printed[2] / 2, rel=1e-2)
    assert re.search(r"not checked here, the cluster run does it: .*bf16 mixed precision", out), out
    assert "end of epoch: reached\n" in out  # the pass that only counted batches is no evaluation
    loop = next(n for n, line in enumerate((path / "train.py").read_text().splitlines(), 1) if "for epoch" in line)
    assert f"end of training: the script left its training loop (train.py:{loop}) after its first epoch\n" in out
