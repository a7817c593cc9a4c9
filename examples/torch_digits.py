"""A small CNN on scikit-learn's 8x8 digits, written in plain PyTorch.

Run it with real PyTorch (``python examples/torch_digits.py``) or, unchanged,
on Dragon: ``python -m dragon_core.vm.torch examples/torch_digits.py``.
Prints the test accuracy (the test in tests/vm_torch expects >= 97%).
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))   # 16 x 4 x 4
        x = self.pool(F.relu(self.conv2(x)))             # 32 x 2 x 2
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


def main():
    torch.manual_seed(0)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    n_train = 1400
    train = TensorDataset(torch.from_numpy(x[:n_train]), torch.from_numpy(y[:n_train]))
    x_test, y_test = torch.from_numpy(x[n_train:]), torch.from_numpy(y[n_train:])
    loader = DataLoader(train, batch_size=32, shuffle=True)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    for epoch in range(8):
        model.train()
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item() * xb.size(0)
        scheduler.step()
        model.eval()
        with torch.no_grad():
            pred = model(x_test).argmax(dim=1)
            acc = (pred == y_test).float().mean().item()
        print(f"epoch {epoch + 1}: loss {total / n_train:.4f}  test accuracy {acc:.4f}")
    print(f"final test accuracy: {acc:.4f}")
    return acc


if __name__ == "__main__":
    main()
