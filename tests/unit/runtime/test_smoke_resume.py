"""What a smoke rank records of where it began: a fingerprint of the parameters an optimizer steps (equal after a
checkpoint's round trip, different after a step), the step count the optimizer keeps in its state."""

from __future__ import annotations

import io

import torch

from vdk.plugin.ml_training.runtime import smoke_resume


def model_and_adam(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 300), torch.nn.ReLU(), torch.nn.Linear(300, 1))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def step(model, optimizer):
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_checkpoint_s_parameters_have_the_fingerprint_they_had_when_saved():
    model, adam = model_and_adam()
    began = smoke_resume.fingerprint(adam)
    step(model, adam)
    after_one = smoke_resume.fingerprint(adam)
    assert after_one != began
    saved = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": adam.state_dict()}, saved)

    restored, fresh_adam = model_and_adam(seed=1)  # a second start: other initial values
    assert smoke_resume.fingerprint(fresh_adam) not in (began, after_one)
    assert smoke_resume._optimizer_step(fresh_adam) is None  # no state yet
    saved.seek(0)
    state = torch.load(saved)
    restored.load_state_dict(state["model"])
    fresh_adam.load_state_dict(state["optimizer"])
    assert smoke_resume.fingerprint(fresh_adam) == after_one
    assert smoke_resume._optimizer_step(fresh_adam) == 1


def test_a_second_start_that_begins_as_the_first_did_has_its_first_fingerprint():
    assert smoke_resume.fingerprint(model_and_adam()[1]) == smoke_resume.fingerprint(model_and_adam()[1])
