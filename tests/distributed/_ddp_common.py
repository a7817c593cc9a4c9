"""What the DDP worker and the single-process reference share."""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import nn
from dragon_core.data import epoch_order
from dragon_core.nn import functional as F

SEED = 0
WORLD = 2
BATCH_PER_RANK = 16
NUM_TRAIN = 128            # 4 steps per epoch per rank
EPOCHS = 2
LR = 0.05
CKPT_EVERY = 3
# Scaled to this small model (~56 KiB of parameters) so it has several
# buckets; the defaults (1 MiB, 25 MiB) are checked by test_plan_buckets.
FIRST_CAP_MB = 8 / 1024
CAP_MB = 24 / 1024


def make_model():
    """examples/train_digits.py's DigitsNet without the dropout (whose masks
    would differ between one process and two)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10))


def train_data():
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))[:NUM_TRAIN]
    return x[order], y[order]


def reference(no_sync: bool = False) -> dict:
    """One process, plain BatchNorm, trained on the concatenation of the
    ranks' batches (rank 0's rows, then rank 1's) — what DDP must equal."""
    dg.manual_seed(SEED)
    model = make_model()
    opt = dg.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x, y = train_data()
    steps = NUM_TRAIN // WORLD // BATCH_PER_RANK
    for epoch in range(EPOCHS):
        orders = [epoch_order(NUM_TRAIN, shuffle="example", seed=SEED, epoch=epoch, rank=r,
                              world_size=WORLD) for r in range(WORLD)]
        for k in range(steps):
            rows = [o[k * BATCH_PER_RANK:(k + 1) * BATCH_PER_RANK] for o in orders]
            opt.zero_grad()
            if no_sync:
                half = BATCH_PER_RANK // 2
                for part in (slice(0, half), slice(half, None)):
                    idx = np.concatenate([r[part] for r in rows])
                    F.cross_entropy(model(dg.tensor(x[idx])), dg.tensor(y[idx])).backward()
            else:
                idx = np.concatenate(rows)
                F.cross_entropy(model(dg.tensor(x[idx])), dg.tensor(y[idx])).backward()
            opt.step()
    return {k: v.numpy() for k, v in model.state_dict().items()}
