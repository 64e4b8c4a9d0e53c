"""A small classifier trained with a plain loop on one GPU, the way the PyTorch quickstart writes it, with its
hyperparameters on the command line (argparse). It prints `val_loss=...` after every epoch; nothing in it knows
about sweeps: config.ini's [ml-training.sweep] tries its learning rate, batch size and width."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data import TensorDataset

device = "cuda"


def synthetic_points(n: int, seed: int) -> TensorDataset:
    """Two interleaved spirals: a problem a small network learns in a few epochs, offline."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=generator)
    radius = torch.rand(n, generator=generator) * 3 + 0.5
    angle = radius * 2.5 + labels * torch.pi
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    points += torch.randn(n, 2, generator=generator) * 0.1
    return TensorDataset(points, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()

    train_loader = DataLoader(synthetic_points(4096, seed=0), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(synthetic_points(1024, seed=1), batch_size=256)
    model = nn.Sequential(
        nn.Linear(2, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 2)
    ).to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        total, correct = 0.0, 0
        with torch.no_grad():
            for x, y in val_loader:
                x, y = x.to(device), y.to(device)
                logits = model(x)
                total += loss_fn(logits, y).item() * len(y)
                correct += (logits.argmax(1) == y).sum().item()
        n = len(val_loader.dataset)
        print(f"epoch {epoch}: val_loss={total / n:.4f} val_acc={correct / n:.3f}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
