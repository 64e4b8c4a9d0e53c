"""Multi-GPU training with DistributedDataParallel, launched by torchrun (as in the PyTorch
"Multi GPU training with DDP" tutorial): one process per GPU, NCCL, a DistributedSampler, and the
tutorial's fault tolerance: a snapshot in the working directory after every epoch, from which a
restarted run resumes by itself."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomRegression(Dataset):
    """y = x·w + noise for a fixed w: something a small network can learn."""

    def __init__(self, size: int, features: int = 20):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, features, generator=generator)
        w = torch.randn(features, 1, generator=generator)
        self.y = self.x @ w + 0.1 * torch.randn(size, 1, generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--snapshot", default="snapshot.pt")
    args = parser.parse_args()

    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = dist.get_rank()
    torch.cuda.set_device(local_rank)

    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    dataset = RandomRegression(4096)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=2, pin_memory=True)

    epochs_run = 0
    if os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot, map_location="cpu")
        model.module.load_state_dict(snapshot["MODEL_STATE"])
        optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        epochs_run = snapshot["EPOCHS_RUN"]
        if rank == 0:
            print(f"Resuming training from snapshot at epoch {epochs_run}")

    for epoch in range(epochs_run, args.epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            x, y = x.to(local_rank, non_blocking=True), y.to(local_rank, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        if rank == 0:  # written whole, then renamed: a kill mid-save leaves the last good snapshot
            state = {"MODEL_STATE": model.module.state_dict(), "OPTIMIZER_STATE": optimizer.state_dict()}
            torch.save({**state, "EPOCHS_RUN": epoch + 1}, args.snapshot + ".tmp")
            os.replace(args.snapshot + ".tmp", args.snapshot)

    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
