"""The workers a smoke rank starts with torch.multiprocessing are ranks of the smoke run, whichever way
multiprocessing starts them: each stops after smoke_steps optimizer steps and reports its steps and the
stand-ins it needed in its own result file."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from tests.support.bootstrap_runs import environ_without
from tests.support.bootstrap_runs import torchrun_command
from tests.support.ddp_scripts import MP_SPAWN_IMPORTS
from tests.support.registry import free_port
from vdk.plugin.ml_training.runtime import protocol

SCRIPT = (
    MP_SPAWN_IMPORTS
    + """

def main(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "{port}"
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    data = TensorDataset(torch.randn(256, 20), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(20, 2).to(rank), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for source, targets in loader:
            source, targets = source.to(rank), targets.to(rank)
            optimizer.zero_grad()
            F.cross_entropy(model(source), targets).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.start_processes(main, args=(2,), nprocs=2, start_method="{start_method}")
"""
)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_each_worker_a_smoke_rank_starts_is_a_rank_that_stops_after_the_smoke_steps(tmp_path, start_method):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT.format(port=free_port(), start_method=start_method)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    clean = environ_without("VDK_ML_TRAINING_", "PET_")
    env = {
        **clean,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        protocol.MODE: protocol.SMOKE,
        protocol.RUN_DIR: str(run_dir),
        protocol.SMOKE_STEPS: "2",
        protocol.SMOKE_GPUS: "2",
        protocol.SPAWNED_WORKERS: "2",
    }
    done = subprocess.run(
        torchrun_command("train.py", processes=1), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr

    results = protocol.read_results(run_dir)
    lines = (tmp_path / "train.py").read_text().splitlines()
    loop = next(n for n, line in enumerate(lines, 1) if "for epoch in range" in line)
    for worker in (0, 1):
        result = results[worker]
        # at the first optimizer step of the second epoch each worker left its training loop (the code after it ran)
        assert result["status"] == protocol.FINISHED, result
        assert result["steps"] == 2, result
        assert (
            result["training_end"]["how"]
            == f"the script left its training loop (train.py:{loop}) after its first epoch"
        )
        assert "nccl->gloo" in result["adaptations"] and "DDP device_ids dropped" in result["adaptations"], result
    assert protocol.read_launcher(run_dir)["status"] == protocol.FINISHED
