"""Recognising, from its source, a script that starts its own workers with torch.multiprocessing.spawn."""

from __future__ import annotations

import textwrap

from vdk.plugin.ml_training.source.spawn_scan import SpawnCall
from vdk.plugin.ml_training.source.spawn_scan import scan

# PyTorch's "Getting Started with Distributed Data Parallel" tutorial, abridged.
TUTORIAL = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def demo_basic(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2, f"Requires at least 2 GPUs to run, but got {n_gpus}"
    world_size = n_gpus
    mp.spawn(demo_basic, args=(world_size,), nprocs=world_size, join=True)
"""


def test_the_ddp_tutorial_spawns_one_worker_per_gpu():
    # nprocs=world_size, world_size = n_gpus, n_gpus = torch.cuda.device_count()
    assert scan(TUTORIAL) == SpawnCall(line=18, per_gpu=True)


def test_ways_of_calling_spawn():
    cases = {
        "import torch.multiprocessing as mp\nimport torch\nmp.spawn(f, nprocs=torch.cuda.device_count())": True,
        "import torch\ntorch.multiprocessing.spawn(f, (), torch.accelerator.device_count())": True,
        "from torch.multiprocessing import spawn\nimport torch\nn = torch.cuda.device_count()\nspawn(f, nprocs=n)": (
            True
        ),
        "from torch import multiprocessing as tmp\ntmp.start_processes(f, nprocs=2, start_method='fork')": False,
        "import torch.multiprocessing as mp\nmp.spawn(f, nprocs=args.gpus)": False,
    }
    for source, per_gpu in cases.items():
        call = scan(source)
        assert call is not None and call.per_gpu is per_gpu, source


def test_scripts_that_do_not_spawn_their_workers_are_not_recognised():
    not_spawning = [
        "import multiprocessing as mp\nwith mp.Pool(2) as pool:\n    pool.map(f, range(3))",
        "import torch.multiprocessing as mp\nq = mp.Queue()\np = mp.Process(target=f)\np.start()",
        "import multiprocessing\nmultiprocessing.spawn = None",
        "def spawn(*a, **k): pass\nspawn(f, nprocs=2)",  # a function of its own called spawn
        "this is not python (",
    ]
    for source in not_spawning:
        assert scan(source) is None, source


def test_a_script_that_also_runs_under_torchrun_is_left_to_torchrun():
    both = textwrap.dedent(
        """
        import os
        import torch.multiprocessing as mp

        if __name__ == "__main__":
            if "LOCAL_RANK" in os.environ:
                main(int(os.environ["LOCAL_RANK"]))
            else:
                mp.spawn(main, nprocs=torch.cuda.device_count())
        """
    )
    assert scan(both) is None
    for reads in ('os.environ["RANK"]', 'os.environ.get("WORLD_SIZE")', 'os.getenv("LOCAL_RANK")'):
        assert scan(f"import os, torch.multiprocessing as mp\nr = {reads}\nmp.spawn(f, nprocs=2)") is None
    # setting them for the workers is not reading them
    sets = 'import os, torch.multiprocessing as mp\nos.environ["RANK"] = "0"\nmp.spawn(f, nprocs=2)'
    assert scan(sets) is not None


def test_the_call_is_described_with_where_it_is():
    assert scan(TUTORIAL).describe("train.py") == "train.py:18 mp.spawn(nprocs=torch.cuda.device_count())"
