"""The ``relu_mask`` pass (docs/graph.md): ``ReluGrad(z, dy)`` reads
``relu(z)`` where an earlier Relu computes it, so that z dies at the Relu
(which may then run in place or fuse with z's producer). Unit tests on
hand-built graphs, compared through the executor; an end-to-end residual
block at O0-O3 against eager (ReluGrad itself is checked against NumPy in
tests/ops/test_relu_grad.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph.passes.relu_mask import relu_mask

try:
    from .fixtures import graph
    from .test_fusion import run_graph
except ImportError:  # run as a script
    from fixtures import graph
    from test_fusion import run_graph

F32 = "float32"


def _block(order=("add", "relu", "grad")):
    """z = a + b; y = relu(z); dz = ReluGrad(z, dy) (in ``order``)."""
    ops = {"add": ("Add", ["a", "b"], ["z"], {}),
           "relu": ("Relu", ["z"], ["y"], {}),
           "grad": ("ReluGrad", ["z", "dy"], ["dz"], {})}
    s = (2, 5)
    return graph(inputs=[("a", F32, s), ("b", F32, s), ("dy", F32, s)],
                 ops=[ops[k] for k in order], outputs=["y", "dz"])


def _feeds():
    rng = np.random.default_rng(0)
    f = {n: rng.standard_normal((2, 5)).astype(F32) for n in ("a", "b", "dy")}
    f["a"][0, :2] = -f["b"][0, :2]       # z == 0 exactly: dz must be 0 there
    return f


def test_relu_grad_reads_the_relu_output():
    g = _block()
    new = relu_mask(g)
    assert list(new.op[2].input) == ["y", "dy"]
    assert list(g.op[2].input) == ["z", "dy"]          # the argument is untouched
    for a, b in zip(run_graph(g, _feeds()), run_graph(new, _feeds())):
        np.testing.assert_array_equal(a, b)


def test_no_earlier_relu_no_change():
    g = _block(("add", "grad", "relu"))     # the Relu runs after the ReluGrad
    assert relu_mask(g).SerializeToString() == g.SerializeToString()
    g = graph(inputs=[("z", F32, (3,)), ("dy", F32, (3,))],
              ops=[("ReluGrad", ["dy", "z"], ["dz"], {}), ("Relu", ["z"], ["y"], {})],
              outputs=["dz", "y"])
    assert relu_mask(g).SerializeToString() == g.SerializeToString()


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_residual_block_step(level, dtype):
    """relu(conv(relu(bn(conv(x)))) + x) and its gradients: every level
    equals eager; from O2 the backward reads the Relu outputs, so the Relu
    after the batch norm runs in place (O2) and the residual Add -> Relu
    fuses into one element-wise op (O3)."""
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((2, 4, 5, 5)).astype(dtype)
    wv = (0.3 * rng.standard_normal((4, 4, 3, 3))).astype(dtype)
    ones, zeros = np.ones(4, dtype), np.zeros(4, dtype)

    def step(x, w):
        with dg.GradientTape() as tape:
            tape.watch([x, w])
            h = dg.ops.conv2d(x, w, pads=[(1, 1), (1, 1)])
            b, _, _ = dg.ops.batch_norm(h, dg.tensor(ones), dg.tensor(zeros),
                                        dg.tensor(zeros), dg.tensor(ones))
            r = dg.ops.relu(b)
            y = dg.ops.relu(dg.ops.conv2d(r, w, pads=[(1, 1), (1, 1)]) + x)
            loss = dg.ops.sum(y * y)
        return [y] + tape.gradient(loss, [x, w])

    x, w = dg.tensor(xv), dg.tensor(wv)
    want = [t.numpy() for t in step(x, w)]
    f = dg.function(step, opt_level=level)
    got = [t.numpy() for t in f(x, w)]
    tol = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    g = f.get_graph(x, w)
    ran = g.metadata["passes"].split(",")
    assert ("relu_mask" in ran) == (level >= 2)
    relu_inputs = {o.input[0] for o in g.op if o.type == "Relu"}
    readers = [o for o in g.op if o.type == "ReluGrad"]
    assert len(readers) == 2
    if level >= 2:
        assert not any(o.input[0] in relu_inputs for o in readers)
    if level == 2:   # the Relu after the batch norm writes over its input
        assert any(o.type == "Relu" and "_inplace_input" in o.attr for o in g.op)
    if level == 3:   # the residual Add -> Relu is one fused element-wise op
        fused = [o.attr["_fused_ops"].s for o in g.op if o.type == "FusedElementwise"]
        assert any("Add" in n and "Relu" in n for n in fused), fused
