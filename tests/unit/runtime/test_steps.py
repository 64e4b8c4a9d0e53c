"""Steps of a script without a torch.optim optimizer (manual SGD) are counted the way it trains: a backward
pass followed by an update of the parameters it reached; the loss shown is the last step's, not a sum."""

from __future__ import annotations

import pytest
import torch

from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached
from vdk.plugin.ml_training.runtime.steps import StepCounter
from vdk.plugin.ml_training.runtime.steps import StepLimit


@pytest.fixture
def counter():
    counting = StepCounter(manual_steps=True).install()
    yield counting
    counting.uninstall()


def manual_sgd(model: torch.nn.Module, batches: int, backwards_per_step: int = 1, lr: float = 0.1) -> list[float]:
    """The word-language-model loop: zero_grad, backward, then `p.data.add_(p.grad, alpha=-lr)`."""
    losses = []
    torch.manual_seed(0)
    for _ in range(batches):
        model.zero_grad()
        step_loss = 0.0
        for _ in range(backwards_per_step):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            loss.backward()
            step_loss += loss.item()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(step_loss)
    return losses


def test_each_update_after_a_backward_pass_is_a_step_with_its_own_loss(counter):
    losses = manual_sgd(torch.nn.Linear(3, 1), 4)
    assert counter.steps == 3  # the fourth update is seen when the script ends (or at a next backward pass)
    assert counter.loss() == pytest.approx(losses[2])
    counter.settle()
    assert counter.steps == 4 and counter.loss() == pytest.approx(losses[3])


def test_accumulated_backward_passes_are_one_step_whose_loss_is_their_sum(counter):
    losses = manual_sgd(torch.nn.Linear(3, 1), 3, backwards_per_step=2)
    counter.settle()
    assert counter.steps == 3 and counter.backwards == 6
    assert counter.loss() == pytest.approx(losses[-1])


def test_the_smoke_run_stops_at_smoke_steps_before_the_next_backward_pass(counter):
    StepLimit(2).attach(counter)
    with pytest.raises(SmokeStepsReached):
        manual_sgd(torch.nn.Linear(3, 1), 10)
    assert counter.steps == 2 and counter.backwards == 2  # the third backward pass did not run


def test_backward_passes_without_updates_are_no_steps(counter):
    model = torch.nn.Linear(3, 1)
    for _ in range(3):
        model(torch.randn(2, 3)).sum().backward()  # gradients computed, never applied
    counter.settle()
    assert counter.steps == 0 and counter.backwards == 3


def test_with_a_torch_optim_optimizer_only_its_steps_count(counter):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    counter.settle()
    assert counter.steps == 3 and counter.reached(3) and not counter.reached(4)
