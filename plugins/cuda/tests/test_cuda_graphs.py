"""CUDA Graphs: compiled functions on cuda record their steady-state run and
replay it (ABI 1.5 graph capture; docs/cuda.md, "CUDA Graphs").

Every test compares the replays with the same function run op by op
(``cuda_graph=False``) or with NumPy; they skip without a GPU. The core's
logic (eligibility, static buffers, re-capture, fallback) is tested without
a GPU on toy_async (tests/plugins/test_toy_async_graphs.py).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

DEV = "cuda"


def _mlp(dg, seed, optimizer):
    rng = np.random.default_rng(seed)
    sizes = [64, 48, 32, 10]
    nn = dg.nn
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(),
                          nn.Linear(32, 10))
    state = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        state[f"{2 * i}.weight"] = dg.tensor((rng.standard_normal((b, a)) / np.sqrt(a))
                                             .astype(np.float32))
        state[f"{2 * i}.bias"] = dg.tensor((rng.standard_normal(b) * 0.1).astype(np.float32))
    model.load_state_dict(state)
    model.to(DEV)
    params = list(model.parameters())
    if optimizer == "sgd":
        opt = dg.optim.SGD(params, lr=0.05, momentum=0.9)
    else:
        opt = dg.optim.Adam(params, lr=0.01)
    return model, opt


def _train(dg, cuda_graph, optimizer, steps=8):
    model, opt = _mlp(dg, 0, optimizer)
    loss_fn = dg.nn.CrossEntropyLoss()
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((32, 64)).astype(np.float32),
                rng.integers(0, 10, 32).astype(np.int64)) for _ in range(steps)]

    @dg.function(cuda_graph=cuda_graph)
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = []
    for x, y in batches:   # a new batch every step: the replays read new inputs
        losses.append(step(dg.tensor(x).to(DEV), dg.tensor(y).to(DEV)))
    x0, y0 = (dg.tensor(v).to(DEV) for v in batches[0])
    status = step.cuda_graph_status(x0, y0)
    params = [p.cpu().numpy() for p in model.parameters()]
    return [float(v.cpu().numpy()) for v in losses], params, status


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_training_step_replays_bit_identical_to_op_by_op(gpu, optimizer):
    """An MLP step (forward, backward, fused multi-tensor optimizer) as a
    CUDA Graph gives the same bits as the same step op by op, every step."""
    dg = gpu
    losses_g, params_g, st = _train(dg, True, optimizer)
    losses_p, params_p, st_p = _train(dg, False, optimizer)
    assert st["state"] == "replayed", st
    assert (st["captures"], st["replays"]) == (1, 5), st
    assert not st_p["enabled"]
    assert losses_g == losses_p
    for a, b in zip(params_g, params_p):
        np.testing.assert_array_equal(a, b)
    model0, _ = _mlp(dg, 0, optimizer)   # the replays did update the parameters
    for a, p0 in zip(params_g, model0.parameters()):
        assert not np.array_equal(a, p0.cpu().numpy())


def test_replay_reads_new_input_values(gpu):
    dg = gpu
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    W, B = dg.tensor(w).to(DEV), dg.tensor(b).to(DEV)

    @dg.function
    def f(x):
        return dg.ops.relu(dg.ops.matmul(x, W) + B)

    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(8)]
    outs = [f(dg.tensor(x).to(DEV)) for x in xs]
    for x, y in zip(xs, outs):   # each call's output is its own
        np.testing.assert_allclose(y.cpu().numpy(), np.maximum(x @ w + b, 0), rtol=1e-5,
                                   atol=1e-5)
    st = f.cuda_graph_status(dg.tensor(xs[0]).to(DEV))
    assert (st["state"], st["captures"], st["replays"]) == ("replayed", 1, 5), st
    # A captured parameter assigned a new value: the replay reads it.
    W.assign(dg.tensor(2 * w).to(DEV))
    got = f(dg.tensor(xs[0]).to(DEV)).cpu().numpy()
    np.testing.assert_allclose(got, np.maximum(xs[0] @ (2 * w) + b, 0), rtol=1e-5, atol=1e-5)


def test_new_shape_gets_its_own_graph(gpu):
    dg = gpu

    @dg.function
    def f(x):
        return dg.ops.exp(x) * x

    for n in (5, 9, 5):
        for k in range(5):
            a = np.linspace(-1, 1, n).astype(np.float32) * (k + 1)
            np.testing.assert_allclose(f(dg.tensor(a).to(DEV)).cpu().numpy(), np.exp(a) * a,
                                       rtol=1e-6)
    st5 = f.cuda_graph_status(dg.tensor(np.zeros(5, np.float32)).to(DEV))
    st9 = f.cuda_graph_status(dg.tensor(np.zeros(9, np.float32)).to(DEV))
    assert st5["captures"] == 1 and st5["replays"] == 7, st5
    assert st9["captures"] == 1 and st9["replays"] == 2, st9


def test_dropout_is_ineligible_and_draws_fresh_masks(gpu):
    dg = gpu

    @dg.function
    def f(x):
        return dg.nn.functional.dropout(x, 0.5)

    x = dg.tensor(np.ones(4096, np.float32)).to(DEV)
    masks = [f(x).cpu().numpy() != 0 for _ in range(6)]
    assert all(not np.array_equal(masks[0], m) for m in masks[1:])
    st = f.cuda_graph_status(x)
    assert st["state"] == "ineligible" and "fresh random seed" in st["reason"], st


def test_replays_make_no_syncs_and_no_device_allocations(gpu):
    dg = gpu
    model, opt = _mlp(dg, 3, "sgd")
    loss_fn = dg.nn.CrossEntropyLoss()
    rng = np.random.default_rng(4)
    x = dg.tensor(rng.standard_normal((32, 64)).astype(np.float32)).to(DEV)
    y = dg.tensor(rng.integers(0, 10, 32).astype(np.int64)).to(DEV)

    @dg.function
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for i in range(30):
        if i == 8:
            before = dg.memory.stats(DEV)
        loss = step(x, y)
    after = dg.memory.stats(DEV)
    for k in ("device_syncs", "num_allocs", "num_frees", "stream_syncs"):
        assert after[k] == before[k], (k, before[k], after[k])
    assert np.isfinite(float(loss.cpu().numpy()))
    assert step.cuda_graph_status(x, y)["replays"] == 27
