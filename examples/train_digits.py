"""Train a small CNN on scikit-learn's digits, eagerly and as one graph.

The data set (1,797 8x8 grey images of the digits 0-9) ships inside the
scikit-learn wheel, so nothing is downloaded. The same model is trained
twice from the same initial weights: once eagerly (``loss.backward()`` and
``optimizer.step()`` per batch) and once with the whole training step
compiled by ``@dragon_core.function`` (forward, backward and the fused SGD
update run by the C++ executor). Each run must reach 97% test accuracy; the
graph-mode model is saved as a checkpoint, reloaded and re-checked, and both
runs log scalars, histograms, sample images and the model graph for
TensorBoard.

``--device cuda`` (or any device a plugin registers) trains on that device:
the model, the optimizer state and every batch live there; an unavailable
device stops the run at once with the reason (no fallback to the CPU).

Run ``python examples/train_digits.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import dragon_core as dg
from dragon_core import nn
from dragon_core.nn import functional as F


class DigitsNet(nn.Module):
    """conv-bn-relu-pool x2, then a 2-layer classifier with dropout."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def load_digits(seed: int):
    """(x_train, y_train, x_test, y_test): 80/20 split, pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits as sk_digits
    data = sk_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]      # [N, 1, 8, 8]
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    split = int(0.8 * len(x))
    train, test = order[:split], order[split:]
    return x[train], y[train], x[test], y[test]


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    device = next(iter(model.parameters())).device
    with dg.no_grad():
        logits = model(dg.tensor(x).to(str(device))).cpu().numpy()
    model.train()
    return float((logits.argmax(axis=1) == y).mean())


def train(mode: str, args, data, init_state, logdir: str):
    """Train one model in ``mode`` ("eager" or "graph"); returns (model, acc, s)."""
    x_train, y_train, x_test, y_test = data
    dg.manual_seed(args.seed)
    model = DigitsNet()
    model.load_state_dict(init_state)
    model.to(args.device)              # before the optimizer: moving replaces parameters
    params = list(model.parameters())
    opt = dg.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sched = dg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loader = dg.data.DataLoader(dg.data.TensorDataset(x_train, y_train),
                                batch_size=args.batch_size, shuffle=True, drop_last=True,
                                seed=args.seed)

    def eager_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    @dg.function
    def graph_step(x, y):
        with dg.GradientTape() as tape:
            tape.watch(params)
            loss = F.cross_entropy(model(x), y)
        opt.step(tape.gradient(loss, params))
        return loss

    step = graph_step if mode == "graph" else eager_step
    writer = dg.summary.SummaryWriter(os.path.join(logdir, mode))
    t0 = time.perf_counter()
    global_step = 0
    for epoch in range(args.epochs):
        losses = []
        bar = dg.summary.progress(loader, desc=f"{mode} epoch {epoch + 1}/{args.epochs}",
                                  force=args.progress)
        for xb, yb in bar:
            xb, yb = xb.to(args.device), yb.to(args.device)
            loss = step(xb, yb).item()
            losses.append(loss)
            writer.add_scalar("train/loss", loss, global_step)
            global_step += 1
        sched.step()
        acc = accuracy(model, x_test, y_test)
        writer.add_scalar("test/accuracy", acc, epoch)
        writer.add_scalar("train/lr", opt.param_groups[0]["lr"], epoch)
        for name, p in model.named_parameters():
            writer.add_histogram(f"params/{name}", p.cpu().numpy(), epoch)
        print(f"  {mode:5s} epoch {epoch + 1:2d}: loss {np.mean(losses):.4f}  "
              f"test accuracy {acc:.2%}")
    seconds = time.perf_counter() - t0
    writer.add_image("samples/test", np.concatenate(list(x_test[:8, 0]), axis=1)[None], 0)
    if mode == "graph":
        writer.add_graph(graph_step, dg.tensor(x_train[:args.batch_size]).to(args.device),
                         dg.tensor(y_train[:args.batch_size]).to(args.device))
    writer.close()
    return model, accuracy(model, x_test, y_test), seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "dragon_digits"),
                        help="where the checkpoint and TensorBoard logs go")
    parser.add_argument("--progress", action="store_true",
                        help="show progress bars even when stdout is not a terminal")
    parser.add_argument("--min-accuracy", type=float, default=0.97)
    parser.add_argument("--device", default="cpu",
                        help="device to train on: cpu, cuda, cuda:1, ... (default cpu)")
    args = parser.parse_args(argv)
    device = dg.device(args.device)
    namespace = getattr(dg, device.type)
    if device.index >= namespace.device_count():
        reason = namespace.unavailable_reason() or (
            f"only {namespace.device_count()} {device.type} device(s)")
        print(f"cannot train on {device}: {reason}")
        return 2
    args.device = str(device)

    start = time.perf_counter()
    data = load_digits(args.seed)
    print(f"digits: {len(data[0])} training and {len(data[2])} test images of 8x8")
    dg.manual_seed(args.seed)
    init_state = {k: v.numpy().copy() for k, v in DigitsNet().state_dict().items()}
    logdir = os.path.join(args.out, "logs")
    results = {}
    for mode in ("eager", "graph"):
        model, acc, seconds = train(mode, args, data, init_state, logdir)
        results[mode] = (model, acc, seconds)
        print(f"{mode}: test accuracy {acc:.2%} in {seconds:.1f} s")

    model = results["graph"][0]
    ckpt = os.path.join(args.out, "digits_cnn.dgt")
    dg.save({"model": model.state_dict(), "accuracy": results["graph"][1]}, ckpt)
    restored = DigitsNet().to(args.device)
    restored.load_state_dict(dg.load(ckpt)["model"])
    acc = accuracy(restored, data[2], data[3])
    print(f"checkpoint: {ckpt} (reloaded model: test accuracy {acc:.2%})")
    print(f"TensorBoard logs: {logdir}  (tensorboard --logdir {logdir})")
    print(f"total time: {time.perf_counter() - start:.1f} s")
    ok = all(r[1] >= args.min_accuracy for r in results.values()) and acc == results["graph"][1]
    if not ok:
        print(f"FAILED: accuracy below {args.min_accuracy:.0%} or checkpoint mismatch")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
