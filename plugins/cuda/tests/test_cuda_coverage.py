"""Which ops the nn, optim and data paths use have a cuda kernel.

Representative training steps (a CNN with batch norm, pooling, dropout,
GELU, layer norm and Adam; an embedding model with log-softmax, NLL and SGD
with momentum; an MLP with MSE, AdamW and the graph optimiser's fusions)
are traced on the CPU, with the optimizers' multi-tensor updates (the
default, which a cuda step runs too) and with per-parameter ones
(foreach=False); every op of their graphs, eager (opt_level=0) and
optimised (opt_level=3), is looked up in the kernel registry for "cuda".
The ops without one are listed in KNOWN_GAPS: the test fails when a new gap
appears (a model path gained an op) and when a gap is closed (shrink the
list), so the state of the port is always visible here and in docs/cuda.md.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import nn

#: Ops the traced training steps use that have no cuda kernel yet.
KNOWN_GAPS = frozenset()


def _graph_ops(fn, args, opt_level):
    f = dg.function(fn, opt_level=opt_level)
    return {o.type for o in f.get_graph(*args).op}


def _cnn_step_ops(foreach):
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16),
                          nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 5))
    opt = dg.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
    x = dg.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    t = dg.tensor(np.array([1, 3]), dtype="int64")

    def step(x, t):
        loss = nn.functional.cross_entropy(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, (x, t)


def _embedding_step_ops(foreach):
    emb, lin = nn.Embedding(10, 8), nn.Linear(8, 3)
    opt = dg.optim.SGD(list(emb.parameters()) + list(lin.parameters()), lr=0.1, momentum=0.9,
                       foreach=foreach)
    idx = dg.tensor(np.array([[1, 2], [3, 4]]), dtype="int64")
    t = dg.tensor(np.array([0, 2]), dtype="int64")

    def step(i, t):
        h = dg.ops.mean(emb(i), axis=[1])
        loss = nn.functional.nll_loss(nn.functional.log_softmax(lin(h), dim=-1), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, (idx, t)


def _mlp_step_ops(foreach):
    rng = np.random.default_rng(1)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Sigmoid(),
                          nn.Linear(8, 2))
    opt = dg.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    x = dg.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    y = dg.tensor(rng.standard_normal((4, 2)).astype(np.float32))

    def step(x, y):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step, (x, y)


def _used_ops():
    used = set()
    for make in (_cnn_step_ops, _embedding_step_ops, _mlp_step_ops):
        for foreach in (None, False):
            for level in (0, 3):
                step, args = make(foreach)
                used |= _graph_ops(step, args, level)
    return used


def _has_cuda_kernel(op):
    return any(k["device"] == "cuda" for k in dg.plugins.kernels(op))


def test_training_paths_ops_with_and_without_cuda_kernels():
    used = _used_ops()
    assert {"MatMul", "AdamUpdate", "SgdUpdate", "MultiAdamUpdate", "MultiSgdUpdate", "Softmax",
            "Sum"} <= used, sorted(used)
    missing = {op for op in used if not _has_cuda_kernel(op)}
    new_gaps = sorted(missing - KNOWN_GAPS)
    closed = sorted(KNOWN_GAPS - missing)
    assert not new_gaps, f"ops used by nn/optim paths without a cuda kernel: {new_gaps}"
    assert not closed, f"these ops now have cuda kernels or are no longer used: {closed}; " \
                       "remove them from KNOWN_GAPS and docs/cuda.md"


def test_every_cuda_kernel_has_a_cpu_kernel_to_compare_with():
    """The conformance suite compares each cuda kernel of this plugin with
    the CPU one (other plugins' cuda kernels, e.g. dragon-nccl-dist's
    collectives, are tested by their own suites)."""
    ops = {d["name"] for d in dg._C.list_ops()}
    cuda_ops = sorted(op for op in ops if any(
        k["device"] == "cuda" and k["plugin"] == "cuda" for k in dg.plugins.kernels(op)))
    assert len(cuda_ops) >= 70, cuda_ops
    no_cpu = [op for op in cuda_ops
              if not any(k["device"] == "cpu" for k in dg.plugins.kernels(op))]
    assert not no_cpu, no_cpu
