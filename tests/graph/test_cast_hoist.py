"""The cast_hoist pass: a Cast moves above the view ops that feed it
(dragon_core/_graph/passes/cast_hoist.py). Every case checks that the pass
fired (or did not), and that the results are bit for bit those of the same
function without the pass and of NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import numpy_dtype


def _ops(fn, *args):
    return list(fn.get_graph(*args).op)


def _producer(ops, name):
    for op in ops:
        if name in op.output:
            return op
    return None


def _cast_sources(fn, *args):
    """The op type each Cast of the optimised graph reads (or 'input')."""
    ops = _ops(fn, *args)
    out = []
    for op in ops:
        if op.type == "Cast":
            p = _producer(ops, op.input[0])
            out.append(p.type if p is not None else "input")
    return out


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def _same_bits(on, off, *args):
    a, b = on(*args), off(*args)
    a = a if isinstance(a, (list, tuple)) else [a]
    b = b if isinstance(b, (list, tuple)) else [b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(_bits(x.numpy()), _bits(y.numpy()))
    return [x.numpy() for x in a]


def _both(f):
    return dg.function(f), dg.function(f, disable_passes=("cast_hoist",))


@pytest.fixture
def x():
    rng = np.random.default_rng(5)
    return dg.tensor(rng.standard_normal((2, 6, 16)).astype(np.float32))


@pytest.fixture
def bias():
    return dg.tensor(np.linspace(-1, 1, 16).astype(np.float32))


@pytest.mark.parametrize("dst", ["bfloat16", "float16", "int32", "uint8", "bool"])
def test_head_split_cast_moves_to_the_producer(x, bias, dst):
    """Add -> Reshape -> Transpose -> Cast becomes Add -> Cast -> Reshape ->
    Transpose: the Cast reads the Add's dense output."""
    def f(x, b):
        h = dg.ops.transpose(dg.ops.reshape(x + b, (2, 6, 4, 4)), (0, 2, 1, 3))
        return h.astype(dst)

    on, off = _both(f)
    assert _cast_sources(on, x, bias) == ["Add"]
    assert _cast_sources(off, x, bias) == ["Transpose"]
    (got,) = _same_bits(on, off, x, bias)
    ref = (x.numpy() + bias.numpy()).reshape(2, 6, 4, 4).transpose(0, 2, 1, 3)
    if dst in ("int32", "uint8"):  # float -> int saturates (docs/ops.md, Cast)
        ref = np.clip(np.trunc(ref), np.iinfo(dst).min, np.iinfo(dst).max)
    np.testing.assert_array_equal(got, ref.astype(numpy_dtype(dst)))
    assert got.dtype == numpy_dtype(dst) and got.shape == (2, 4, 6, 4)


def test_chain_of_views_of_every_kind(x, bias):
    """Transpose, Reshape, Squeeze, Unsqueeze and Flatten in one chain."""
    def f(x, b):
        y = dg.ops.unsqueeze(x + b, 0)                   # [1, 2, 6, 16]
        y = dg.ops.transpose(y, (0, 3, 2, 1))            # [1, 16, 6, 2]
        y = dg.ops.squeeze(y, 0)                         # [16, 6, 2]
        y = dg.ops.flatten(y, 1, 2)                      # [16, 12]
        y = dg.ops.transpose(dg.ops.reshape(y, (4, 4, 12)), (2, 0, 1))
        return y.astype("bfloat16")

    on, off = _both(f)
    assert _cast_sources(on, x, bias) == ["Add"]
    (got,) = _same_bits(on, off, x, bias)
    ref = (x.numpy() + bias.numpy())[None].transpose(0, 3, 2, 1)[0].reshape(16, 12)
    ref = ref.reshape(4, 4, 12).transpose(2, 0, 1)
    np.testing.assert_array_equal(_bits(got), _bits(ref.astype(numpy_dtype("bfloat16"))))


def test_widening_cast_stays(x, bias):
    """bfloat16 -> float32 is left where it is (a hoisted widening Cast would
    make a later copy move wider elements)."""
    def f(x, b):
        h = (x + b).astype("bfloat16") * 2.0
        return dg.ops.transpose(dg.ops.reshape(h, (2, 6, 4, 4)), (0, 2, 1, 3)).astype("float32")

    on, off = _both(f)
    assert _cast_sources(on, x, bias)[-1] == "Transpose"
    _same_bits(on, off, x, bias)


def test_view_read_twice_stops_the_chain(x, bias):
    """A view with another reader is where the Cast stops; the other reader
    still reads float32."""
    def f(x, b):
        r = dg.ops.reshape(x + b, (2, 6, 4, 4))
        t = dg.ops.transpose(r, (0, 2, 1, 3))
        return t.astype("bfloat16"), dg.ops.sum(t, axis=-1)

    on, off = _both(f)
    ops = _ops(on, x, bias)
    (cast,) = [op for op in ops if op.type == "Cast"]
    assert _producer(ops, cast.input[0]).type == "Transpose"
    got = _same_bits(on, off, x, bias)
    assert got[1].dtype == np.float32


def test_root_with_other_readers_keeps_them(x, bias):
    """The root (the Add) is read by another op too: the Cast reads it and
    the other reader is unchanged."""
    def f(x, b):
        a = x + b
        h = dg.ops.transpose(dg.ops.reshape(a, (2, 6, 4, 4)), (0, 2, 1, 3)).astype("bfloat16")
        return h, dg.ops.relu(a)

    on, off = _both(f)
    assert _cast_sources(on, x, bias) == ["Add"]
    got = _same_bits(on, off, x, bias)
    np.testing.assert_array_equal(got[1], np.maximum(x.numpy() + bias.numpy(), 0))


def test_view_that_is_a_graph_output_stays(x, bias):
    def f(x, b):
        t = dg.ops.transpose(dg.ops.reshape(x + b, (2, 6, 4, 4)), (0, 2, 1, 3))
        return t, t.astype("bfloat16")

    on, off = _both(f)
    assert _cast_sources(on, x, bias) == ["Transpose"]
    _same_bits(on, off, x, bias)


def test_cast_of_graph_input_view(x):
    """The root may be a graph input: the Cast reads it directly."""
    def f(x):
        return dg.ops.transpose(x, (2, 0, 1)).astype("float16")

    on, off = _both(f)
    assert _cast_sources(on, x) == ["input"]
    (got,) = _same_bits(on, off, x)
    np.testing.assert_array_equal(got, x.numpy().transpose(2, 0, 1).astype(np.float16))


def test_empty_and_zero_d():
    """Edge shapes keep their values (and the pass keeps the graph valid)."""
    e = dg.tensor(np.zeros((0, 3, 4), np.float32))
    s = dg.tensor(np.float32(2.5))

    def f(e, s):
        t = dg.ops.transpose(dg.ops.reshape(e + 1.0, (3, 0, 4)), (2, 1, 0))
        return (t.astype("bfloat16"),
                dg.ops.reshape(s * 2.0, (1, 1)).astype("int64"))

    on, off = _both(f)
    got = _same_bits(on, off, e, s)
    assert got[0].shape == (4, 0, 3) and got[1].tolist() == [[5]]


def test_pass_is_pure(x, bias):
    """The pass leaves its input graph as it was and keeps value_info right."""
    from dragon_core._graph.passes.cast_hoist import cast_hoist

    def f(x, b):
        t = dg.ops.transpose(dg.ops.reshape(x + b, (2, 6, 4, 4)), (0, 2, 1, 3))
        return t.astype("bfloat16")

    g = dg.function(f, disable_passes=("cast_hoist",)).get_graph(x, bias)
    before = g.SerializeToString()
    new = cast_hoist(g)
    assert g.SerializeToString() == before
    assert new is not g
    info = {v.name: v for v in new.value_info}
    bf16 = dg.bfloat16
    for op in new.op:
        for o in op.output:
            if op.type in ("Cast", "Reshape", "Transpose"):
                assert info[o].dtype == dg._dtypes.as_dtype(bf16).code, (op.type, o)
    # Every value is written before it is read (topological order kept).
    seen = set(new.input) | {c.name for c in new.constant}
    for op in new.op:
        assert all(i in seen for i in op.input if i), op
        seen.update(op.output)
    # Nothing to do: the same object back.
    assert cast_hoist(new) is new


def test_autocast_attention_training_step_is_bit_identical():
    """A small autocast attention block trained for three steps: the losses
    and the parameters are bit for bit those without the pass, and the
    pass moved the head casts of Q, K and V."""
    def make():
        rng = np.random.default_rng(11)
        w = [dg.tensor(rng.standard_normal((16, 16)).astype(np.float32) * 0.3) for _ in range(4)]
        for p in w:
            p.requires_grad = True
        opt = dg.optim.Adam(w, lr=1e-2)

        def heads(t):
            return dg.ops.transpose(dg.ops.reshape(t, (2, 6, 4, 4)), (0, 2, 1, 3))

        def step(x, t):
            opt.zero_grad()
            with dg.autocast("cpu"):
                q, k, v = (heads(dg.ops.matmul(x, wi) + 0.1) for wi in w[:3])
                s = dg.ops.softmax(dg.ops.matmul(q, dg.ops.transpose(k, (0, 1, 3, 2))) * 0.5, -1)
                o = dg.ops.reshape(dg.ops.transpose(dg.ops.matmul(s, v), (0, 2, 1, 3)), (2, 6, 16))
                loss = dg.nn.functional.mse_loss(dg.ops.matmul(o, w[3]), t)
            loss.backward()
            opt.step()
            return loss
        return step, w

    rng = np.random.default_rng(2)
    x = dg.tensor(rng.standard_normal((2, 6, 16)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((2, 6, 16)).astype(np.float32))
    results = []
    for disable in ((), ("cast_hoist",)):
        step, w = make()
        fn = dg.function(step, disable_passes=disable)
        losses = [fn(x, t).numpy().copy() for _ in range(3)]
        results.append((losses, [p.numpy().copy() for p in w], _cast_sources(fn, x, t)))
    (l_on, w_on, src_on), (l_off, w_off, src_off) = results
    assert src_off.count("Transpose") >= 3
    assert src_on.count("Transpose") < src_off.count("Transpose")
    for a, b in zip(l_on + w_on, l_off + w_off):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    assert np.isfinite(l_on[-1]) and l_on[-1] < l_on[0]
