"""How the smoke run's resume check reads the second start: from the parameters it first stepped (those of a step of
the first start, or those it began with), the optimizer state it restored, a framework's word; and what it says."""

from __future__ import annotations

import dataclasses

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops import resume_check

FIRST = {"fingerprints": {"0": ["start", "after-1", "after-2", "after-3"]}}


def test_the_parameters_first_stepped_say_which_step_it_resumed_from():
    assert resume_check.resumed_step(FIRST, {"first_step": {"fingerprint": "after-2"}}) == 2
    assert resume_check.resumed_step(FIRST, {"first_step": {"fingerprint": "start"}}) == 0  # it began as before
    # none of the first start's: the optimizer's own step count, if it kept one (a restored Adam)
    assert resume_check.resumed_step(FIRST, {"first_step": {"fingerprint": "x", "optimizer_step": 7}}) == 7
    assert resume_check.resumed_step(FIRST, {"first_step": {"fingerprint": "x", "optimizer_step": None}}) is None
    # a step that changed nothing (a zero learning rate): the furthest step with those parameters
    flat = {"fingerprints": {"0": ["same", "same", "same"]}}
    assert resume_check.resumed_step(flat, {"first_step": {"fingerprint": "same"}}) == 2


def outcomes(tmp_path, smoke_resume_key="check"):
    """A first start that passed with 2 steps on each rank, and a second start that passed."""
    run = make_run(tmp_path, {r: {"status": "stopped", "steps": 2} for r in (0, 1)}, exit_code=0)
    spec = dataclasses.replace(run.plan.spec, smoke_resume=smoke_resume_key)
    run = dataclasses.replace(run, plan=dataclasses.replace(run.plan, spec=spec))
    return run.plan, analyse(run)


def test_a_second_start_that_resumed_says_from_which_checkpoint_and_step(tmp_path):
    plan, outcome = outcomes(tmp_path)
    before = {**FIRST, "on_stop": {"checkpoint": "checkpoint-3", "step": 3}}
    check = resume_check._verdict(plan, outcome, before, {"first_step": {"fingerprint": "after-3"}}, outcome)
    assert not check.failed
    assert check.lines[0].startswith("resume: checkpoint at step 3 written on stop (checkpoint-3), resumed at step 3")
    by_the_script = resume_check._verdict(plan, outcome, FIRST, {"first_step": {"fingerprint": "after-2"}}, outcome)
    assert by_the_script.lines[0].startswith("resume: checkpoint at step 2 written by the script, resumed at step 2")


def test_one_that_started_over_is_a_note_or_with_require_a_failure(tmp_path):
    plan, outcome = outcomes(tmp_path / "check")
    note = resume_check._verdict(plan, outcome, FIRST, {"first_step": {"fingerprint": "start"}}, outcome)
    assert not note.failed and note.lines[0].startswith("note: resume: the second start")
    assert "a run preempted after 2 steps would lose them all and start over" in note.lines[0]
    assert "`smoke_resume = off` skips this check" in note.lines[0]

    plan, outcome = outcomes(tmp_path / "require", "require")
    failed = resume_check._verdict(plan, outcome, FIRST, {"first_step": {"fingerprint": "start"}}, outcome)
    assert failed.failed and failed.finding.what.endswith("(smoke_resume = require)")
    assert "`smoke_resume = check`" in failed.finding.fix and "resume = auto" in failed.finding.fix


def test_a_sampler_set_past_epoch_0_is_a_resume_too(tmp_path):
    plan, outcome = outcomes(tmp_path)
    check = resume_check._verdict(plan, outcome, FIRST, {"first_step": {"fingerprint": "x"}, "epoch": 1}, outcome)
    assert not check.failed and check.lines[0].startswith("resume: the second start went on at epoch 1")
