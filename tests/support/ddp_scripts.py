"""Pieces of the training scripts the tests run, written as PyTorch's DDP tutorials write them."""

# The imports of a tutorial whose script spawns one worker per GPU with torch.multiprocessing and
# splits its data among them with a DistributedSampler (a leading blank line, as the scripts start).
MP_SPAWN_IMPORTS = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
"""


def steps_then_hangs(steps: int, seconds: int, say: str | None = None) -> str:
    """A script that takes `steps` optimizer steps of a tiny model, prints `say` (if given), then sleeps for
    `seconds` in its main thread: a rank that hangs (waiting for data that never comes)."""
    said = f"print({say!r}, flush=True)\n" if say is not None else ""
    return f"""
import time
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
{said}time.sleep({seconds})
"""
