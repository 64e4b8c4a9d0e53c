"""Parameter checksums printed by real ranks: two DDP ranks under torchrun and the bootstrap print the same
digest of what their optimizers stepped when the script ends, unsynchronised ones differ, and without
the setting nothing is printed. (The digest and its line: tests/unit/runtime/test_checksum.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.bootstrap_runs import environ_without
from tests.support.bootstrap_runs import torchrun_command
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.checksum import parse_checksums

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


def _torchrun(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(DDP)
    return subprocess.run(
        torchrun_command("train.py", *args),
        cwd=tmp_path,
        env={**environ_without("VDK_ML_TRAINING_", "PET_"), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_ddp_replicas_print_the_same_digest_and_unsynchronised_ones_do_not(tmp_path):
    on = {protocol.PARAMETER_CHECKSUM: "1", protocol.PROGRESS_SECONDS: "0"}
    synced = _torchrun(tmp_path, env=on)
    assert synced.returncode == 0, synced.stderr
    found = parse_checksums(synced.stdout.splitlines())
    assert sorted(found) == [0, 1] and {c.steps for c in found.values()} == {3} and found[0].tensors == 4
    assert found[0].sha256 == found[1].sha256

    apart = _torchrun(tmp_path, "--no-sync", env=on)
    assert apart.returncode == 0, apart.stderr
    found = parse_checksums(apart.stdout.splitlines())
    assert found[0].sha256 != found[1].sha256


def test_without_the_setting_nothing_is_printed(tmp_path):
    done = _torchrun(tmp_path, env={protocol.PROGRESS_SECONDS: "0"})
    assert done.returncode == 0, done.stderr
    assert parse_checksums(done.stdout.splitlines()) == {}
