"""The GPU training workloads, shared by ``bench_gpu.py`` (the timed rows of
issue 15's table) and ``profile_gpu.py`` (their per-op profiles): the
ResNet-18 step (``models/resnet.py``, SGD momentum 0.9, cross-entropy;
bfloat16 autocast in channels-last, Dragon and torch) and the MLP 784-512-512-10
step (ReLU, SGD momentum 0.9, cross-entropy), each built for Dragon and for
torch from the same seeds, so both sides start from the same weights and
data.
"""

from __future__ import annotations

import numpy as np

from models import resnet

RES_CLASSES = 1000
MLP_SIZES = (784, 512, 512, 10)


# ------------------------------------------------------------------ ResNet-18
def resnet_inputs(batch: int, hw: int):
    """A batch of ``batch`` 3 x hw x hw images and their class labels."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, 3, hw, hw)).astype(np.float32)
    y = rng.integers(0, RES_CLASSES, batch).astype(np.int64)
    return x, y


def resnet_state(dg, torch=None) -> dict:
    """Deterministic float32 weights for both libraries (the names of
    torch's state dict when torch is there, else Dragon's: the same)."""
    lib = torch if torch is not None else dg
    return resnet.random_state(resnet.float_shapes(resnet.resnet18(lib.nn, RES_CLASSES)
                                                   .state_dict()))


def dragon_resnet(dg, state: dict, device: str, bf16: bool, channels_last: bool = False):
    """Dragon's training step ``step(x, y) -> loss`` (eager; compile it
    with ``dg.function``) on a fresh model holding ``state``;
    ``channels_last`` lays its 4-D parameters out channels-last (as torch's
    ``model.to(memory_format=torch.channels_last)``; feed it channels-last
    images, ``x.to(memory_format=dg.channels_last)``)."""
    model = resnet.resnet18(dg.nn, RES_CLASSES)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    model.to(device).train()
    if channels_last:
        model.to(memory_format=dg.channels_last)
    opt = dg.optim.SGD(list(model.parameters()), lr=0.01, momentum=0.9)
    loss_fn = dg.nn.CrossEntropyLoss()

    def step(a, b):
        opt.zero_grad()
        with dg.autocast("cpu", dtype="bfloat16", enabled=bf16):  # a thread-wide policy
            loss = loss_fn(model(a), b)
        loss.backward()
        opt.step()
        return loss
    return step


def torch_resnet(torch, state: dict, x, y, device: str, bf16: bool):
    """torch's step ``step() -> loss`` on ``x, y`` (channels-last in
    bfloat16) and the loss before any update."""
    tm = resnet.resnet18(torch.nn, RES_CLASSES)
    sd = tm.state_dict()
    sd.update({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    tm.load_state_dict(sd)
    tm = tm.to(device).train()
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    if bf16:
        tm = tm.to(memory_format=torch.channels_last)
        tx = tx.to(memory_format=torch.channels_last)
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    tloss = torch.nn.CrossEntropyLoss()

    def step():
        topt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = tloss(tm(tx), ty)
        loss.backward()
        topt.step()
        return loss
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        first = float(tloss(tm(tx), ty))
    return step, first


# ------------------------------------------------------------------ the MLP
def mlp_inputs(batch: int):
    """Weights, biases, a batch of inputs and labels for the MLP."""
    rng = np.random.default_rng(5)
    ws = [(rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
          for i, o in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]
    bs = [(rng.standard_normal(o) * 0.01).astype(np.float32) for o in MLP_SIZES[1:]]
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(np.float32)
    y = rng.integers(0, MLP_SIZES[-1], batch).astype(np.int64)
    return ws, bs, x, y


def dragon_mlp(dg, ws, bs, device: str):
    """Dragon's MLP training step ``step(x, y) -> loss`` on a fresh model."""
    nn = dg.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    model.load_state_dict({f"{2 * i}.{k}": dg.tensor(v) for i, (w, b) in
                           enumerate(zip(ws, bs)) for k, v in (("weight", w), ("bias", b))})
    model.to(device)
    opt = dg.optim.SGD(list(model.parameters()), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(a, b):
        opt.zero_grad()
        loss = loss_fn(model(a), b)
        loss.backward()
        opt.step()
        return loss
    return step


def torch_mlp(torch, ws, bs, x, y, device: str):
    """torch's MLP step ``step() -> loss`` and the loss before any update."""
    tnn = torch.nn
    tm = tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(),
                        tnn.Linear(512, 10))
    with torch.no_grad():
        for m, w, b in zip([m for m in tm if isinstance(m, tnn.Linear)], ws, bs):
            m.weight.copy_(torch.from_numpy(w))
            m.bias.copy_(torch.from_numpy(b))
    tm = tm.to(device)
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    tloss = tnn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    with torch.no_grad():
        first = float(tloss(tm(tx), ty))

    def step():
        topt.zero_grad(set_to_none=True)
        loss = tloss(tm(tx), ty)
        loss.backward()
        topt.step()
        return loss
    return step, first
