"""`vdk run` checks the resume path: after the cut epoch the smoke run stops its ranks as a preemption would and
starts them again in the same working directory. Real scripts through the real `vdk run`: a DDP script whose resume
code loads the wrapped model's keys into the bare model fails with its frame and the fix; one that never resumes
gets the note; an Accelerate loop saves on the stop and resumes with no change to it. (The examples' resume checks,
ddp-nccl's snapshot and the Hugging Face Trainer's checkpoint, are those of
tests/integration/local/test_local_run_processes.py.)"""

from __future__ import annotations

import textwrap

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk_run

pytestmark = pytest.mark.slow

# the frameworks come from vdk's environment, as in test_framework_failures.py
ML = "requirements_overlay = false\nimport_check = false\nsmoke_steps = 2\ngpus_per_node = 2\n"

# The PyTorch DDP tutorial's loop with a checkpoint at the end of every epoch, saved from the DDP-wrapped model
# (its keys start with `module.`) and, when found, loaded into the bare model before it is wrapped.
DDP_CHECKPOINTS = """
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(local_rank)
    start = 0
    if RESUMES and os.path.exists("checkpoint.pt"):
        state = torch.load("checkpoint.pt", map_location="cpu")
        model.load_state_dict(state["model"])
        start = state["epoch"]
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 8)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    for epoch in range(start, 3):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(data, batch_size=16, sampler=sampler):
            loss = torch.nn.functional.mse_loss(model(xb.to(local_rank)), yb.to(local_rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch + 1}, "checkpoint.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

ACCELERATE = """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(3):
        for xb, yb in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
            optimizer.step()
            optimizer.zero_grad()
"""


def run_script(tmp_path, name: str, script: str, ml: str = ML):
    """`vdk run` of a job whose train.py is `script`: the job, and the result."""
    job = write_job(tmp_path, name, ml=ml, files={"train.py": textwrap.dedent(script)})
    return job, vdk_run(job)


def test_resume_code_that_loads_the_wrapped_model_s_keys_into_the_bare_model_fails_with_its_frame(tmp_path):
    job, result = run_script(tmp_path, "ddp-resume-broken", DDP_CHECKPOINTS.replace("RESUMES", "True"))
    assert result.exit_code != 0
    out = result.output
    assert "smoke run FAILED" in out and "the second start, resuming from what the first start wrote" in out
    # the frame in the script, the error, and the fix for this error
    line = (job / "train.py").read_text().splitlines().index('        model.load_state_dict(state["model"])') + 1
    assert f'File "{job}/train.py", line {line}, in main\n    model.load_state_dict(state["model"])' in out, out
    assert 'Unexpected key(s) in state_dict: "module.0.weight"' in out
    assert "saved from the wrapped model (its keys start with `module.`)" in out
    assert "resume: the first start passed and was stopped as a preemption stops it" in out


def test_a_script_that_never_resumes_passes_with_the_note_of_what_a_preemption_would_lose(tmp_path):
    _, result = run_script(tmp_path, "ddp-never-resumes", DDP_CHECKPOINTS.replace("RESUMES", "False"))
    assert result.exit_code == 0, result.output
    assert "resume check: the ranks were stopped as a preemption stops them" in result.output  # it wrote a file
    assert (
        "note: resume: the second start, in the same working directory, started over (it resumed from nothing the "
        "first one wrote): a run preempted after 2 steps would lose them all and start over"
    ) in result.output


def test_an_accelerate_loop_saves_on_the_stop_and_resumes_where_it_stood_with_no_change(tmp_path):
    _, result = run_script(tmp_path, "accelerate-loop", ACCELERATE)
    assert result.exit_code == 0, result.output
    out = result.output
    # the first start: the cut epoch, then the step under way when SIGTERM came, saved at its end
    assert "[vdk-ml-training] stop: checkpoint on-stop-step-3 (step 3) written on the way out" in out
    assert "[vdk-ml-training] resume: resumed from on-stop-step-3 (step 3)" in out
    assert "resume: checkpoint at step 3 written on stop (on-stop-step-3), resumed at step 3" in out
