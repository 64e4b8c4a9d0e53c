"""A small convolutional network on 28x28 images, trained with a plain loop on one GPU
(the PyTorch quickstart's structure; synthetic images instead of FashionMNIST keep it offline)."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data import TensorDataset

device = "cuda"


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def synthetic_images(n: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=generator)
    images = torch.randn(n, 1, 28, 28, generator=generator) * 0.5
    images[torch.arange(n), 0, labels * 2, :] += 2.0  # a bright row that gives the label away
    return TensorDataset(images, labels)


def train(loader, model, loss_fn, optimizer, scaler):
    model.train()
    for batch, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if batch % 50 == 0:
            print(f"loss: {loss.item():>7f}  [{batch * len(x):>5d}/{len(loader.dataset):>5d}]")


def test(loader, model):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
    print(f"accuracy: {100 * correct / len(loader.dataset):.1f}%")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    model = ConvNet().to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    train_loader = DataLoader(synthetic_images(6000), batch_size=64, shuffle=True)
    test_loader = DataLoader(synthetic_images(1000, seed=1), batch_size=256)
    for epoch in range(args.epochs):
        print(f"epoch {epoch + 1}")
        train(train_loader, model, loss_fn, optimizer, scaler)
        test(test_loader, model)
    torch.save(model.state_dict(), "model.pth")


if __name__ == "__main__":
    main()
