"""Smoke runs reach the end of an epoch: DataLoader passes are cut at smoke_steps batches, what follows
the training loop runs once, and the run stops at the first optimizer step of the second epoch; loops
that take no batches from a DataLoader stop after smoke_steps steps and say so."""

from __future__ import annotations

import pytest

# Installs the epoch watch of a smoke run with `steps` smoke steps, runs `{body}` (which appends to
# `events`), and prints what happened as JSON.
HARNESS = """
import json, torch
from torch.utils.data import DataLoader, TensorDataset, IterableDataset
from vdk.plugin.ml_training.runtime import epochs, patching
from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached, StepCounter

adaptations = patching.Adaptations()
counter = StepCounter().install()
watch = epochs.watch(counter, {steps}, adaptations)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
events = []

def train_step(x, y, step=True):
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    if step:
        optimizer.step()
        optimizer.zero_grad()
        events.append("step")

status = "finished"
try:
{body}
except SmokeStepsReached:
    status = "stopped"
end = watch.result(finished=status == "finished")
print(json.dumps({{"status": status, "steps": counter.steps, "events": events, "reached": end.reached,
                  "how": end.how, "then": list(end.then), "why_not": end.why_not, "notes": dict(adaptations.counts)}}))
"""


def run_loop(run_python, body: str, steps: int = 2) -> dict:
    indented = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return run_python(HARNESS.format(steps=steps, body=indented))


def test_a_loop_over_a_dataloader_runs_the_end_of_its_first_epoch_then_stops(run_python):
    out = run_loop(
        run_python,
        """
train = DataLoader(data, batch_size=4)
val = DataLoader(data, batch_size=8)
for epoch in range(3):
    events.append(f"epoch {epoch}: {len(train)} batches")
    for x, y in train:
        train_step(x, y)
    with torch.no_grad():
        seen = sum(1 for x, _ in val if model(x) is not None)
    events.append(f"evaluated {seen}")
    torch.save(model.state_dict(), "/dev/null")
""",
    )
    assert out["status"] == "stopped" and out["steps"] == 2
    # epoch 0: two batches (len() says so), evaluation over two batches, a save; epoch 1 stops at its first step
    assert out["events"] == ["epoch 0: 2 batches", "step", "step", "evaluated 2", "epoch 1: 2 batches"]
    assert out["reached"] and out["then"] == ["evaluation (2 batches)", "1 save"]
    assert out["notes"] == {"epochs cut to 2 batches": 1}


def test_a_script_that_ends_after_its_epochs_ends_as_it_would(run_python):
    out = run_loop(
        run_python,
        """
for x, y in DataLoader(data, batch_size=4):
    train_step(x, y)
events.append("saved")
""",
        steps=3,
    )
    assert out["status"] == "finished" and out["steps"] == 3 and out["events"][-1] == "saved"
    assert out["reached"] and out["then"] == []


def test_gradient_accumulation_over_more_batches_than_smoke_steps_still_steps(run_python):
    out = run_loop(
        run_python,
        """
for epoch in range(2):
    for i, (x, y) in enumerate(DataLoader(data, batch_size=2)):
        train_step(x, y, step=(i + 1) % 4 == 0)
        events.append(i)
    events.append("epoch end")
""",
        steps=1,
    )
    # four batches to the first step, then the epoch ends; the second epoch stops at its first step
    assert out["events"] == [0, 1, 2, "step", 3, "epoch end", 0, 1, 2]
    assert out["status"] == "stopped" and out["steps"] == 1 and out["reached"]


def test_a_loop_that_asks_one_batch_ahead_sees_smoke_steps_batches(run_python):
    # as Accelerate's prepared loaders and Lightning do: the next batch is fetched before this one is trained
    out = run_loop(
        run_python,
        """
def ahead(loader):
    it = iter(loader)
    current = next(it)
    for following in it:
        yield current
        current = following
    yield current

for epoch in range(2):
    for x, y in ahead(DataLoader(data, batch_size=4)):
        train_step(x, y)
    events.append("epoch end")
""",
    )
    assert out["events"] == ["step", "step", "epoch end"] and out["status"] == "stopped" and out["reached"]


def test_iterable_datasets_are_cut_too(run_python):
    out = run_loop(
        run_python,
        """
class Stream(IterableDataset):
    def __iter__(self):
        while True:
            yield torch.randn(4), torch.randn(1)

for epoch in range(2):
    for x, y in DataLoader(Stream(), batch_size=4):
        train_step(x, y)
    events.append("epoch end")
""",
    )
    assert out["events"] == ["step", "step", "epoch end"] and out["status"] == "stopped"


@pytest.mark.parametrize(
    ("loop", "why"),
    [
        (
            "x, y = torch.randn(4, 4), torch.randn(4, 1)\nfor step in range(100):\n    train_step(x, y)",
            "takes no batches from a torch DataLoader",
        ),
        (  # one batch, trained on over and over ("overfit one batch")
            "x, y = next(iter(DataLoader(data, batch_size=4)))\nfor step in range(100):\n    train_step(x, y)",
            "took no new batch from a DataLoader between optimizer steps",
        ),
    ],
)
def test_loops_not_driven_by_a_dataloader_stop_after_smoke_steps_and_say_why(run_python, loop, why):
    out = run_loop(run_python, loop, steps=3)
    assert out["status"] == "stopped" and out["steps"] == 3
    assert not out["reached"] and why in out["why_not"]


def test_a_script_that_ends_before_its_first_epoch_did_says_so(run_python):
    out = run_loop(
        run_python,
        """
batches = iter(DataLoader(data, batch_size=4))
for _ in range(2):
    train_step(*next(batches))
""",
        steps=2,
    )
    assert out["status"] == "finished" and out["steps"] == 2
    assert not out["reached"] and out["why_not"] == "the script ended before a pass over its training DataLoader did"


def test_optimizers_trained_in_turn_count_their_total_and_one_split_model_counts_once(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime.steps import StepCounter
        counter = StepCounter().install()
        g, d = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        opt_g, opt_d = torch.optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(d.parameters(), lr=0.1)
        for _ in range(3):  # a GAN: each optimizer on its own loss
            d(g(torch.ones(2, 2)).detach()).mean().backward(); opt_d.step()
            (1 - d(g(torch.ones(2, 2)))).mean().backward(); opt_g.step()
        in_turn = counter.steps
        for _ in range(3):  # one loss, the model split between two optimizers
            d(g(torch.ones(2, 2))).mean().backward(); opt_g.step(); opt_d.step()
        print(json.dumps({"in_turn": in_turn, "split": counter.steps - in_turn}))
        """
    )
    assert out == {"in_turn": 6, "split": 3}
