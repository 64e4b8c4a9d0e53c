"""Parameter checksums: every rank prints a digest of what its optimizers stepped when its script ends,
in a job image and in local runs; equal parameters give equal digests, and the lines read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from vdk.plugin.ml_training.runtime.checksum import Checksum
from vdk.plugin.ml_training.runtime.checksum import ParameterChecksum
from vdk.plugin.ml_training.runtime.checksum import format_line
from vdk.plugin.ml_training.runtime.checksum import parse_checksums
from vdk.plugin.ml_training.runtime.steps import StepCounter

# Two ranks under torchrun, DDP over gloo, each on its own data: DDP averages the gradients, so both end
# with the same parameters. With --no-sync, each rank steps on its own gradients and they differ.
DDP = """
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    if "--no-sync" not in sys.argv:
        model = DDP(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4, generator=generator)).pow(2).mean().backward()
        optimizer.step()
    dist.destroy_process_group()
"""


# torch's gloo now and then aborts an interpreter's teardown after a script that used it ended well.
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"


def _ended_well(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 or GLOO_TEARDOWN_ABORT in done.stderr


def _torchrun(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(DDP)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VDK_ML_TRAINING_", "PET_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "vdk.plugin.ml_training.runtime.bootstrap",
            "train.py",
            *args,
        ],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_digest_covers_every_stepped_parameter_once_and_changes_with_any():
    def digest(seed: int, poke: bool = False) -> Checksum:
        torch.manual_seed(seed)
        model = torch.nn.Linear(3, 2)
        counter = StepCounter().install()
        try:
            checksum = ParameterChecksum().attach(counter)
            # the same parameters in two optimizers count once
            first = torch.optim.SGD(model.parameters(), lr=0.1)
            second = torch.optim.SGD([model.weight], lr=0.1)
            for optimizer in (first, second):
                model(torch.ones(1, 3)).sum().backward()
                optimizer.step()
            if poke:
                with torch.no_grad():
                    model.bias[0] += 1e-7
            return checksum.take(rank=0)
        finally:
            counter.uninstall()

    a, b = digest(1), digest(1)
    assert a == b and a.tensors == 2 and a.steps == 2  # each optimizer stepped on a backward of its own
    assert digest(1, poke=True).sha256 != a.sha256
    assert digest(2).sha256 != a.sha256
    assert ParameterChecksum().take(0) is None  # nothing stepped: no line


def test_lines_read_back_among_other_output():
    line = format_line(Checksum(3, 32, "ab" * 32, 4))
    other = format_line(Checksum(1, 32, "cd" * 32, 4))
    found = parse_checksums(["epoch 0 loss 1.0", f"[rank3]: {line}", "[vdk-ml-training] parameters rank=x"])
    assert found == {3: Checksum(3, 32, "ab" * 32, 4)}
    assert sorted(parse_checksums([line + other])) == [1, 3]  # two processes' output on one line
