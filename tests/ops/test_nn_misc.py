"""Dropout and Embedding: forward values, the statistics and seeding of the
dropout mask (eager and graph mode), and bad input."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dragon_sdk.testing import FLOAT_DTYPES, op_case

from ._common import sample

# ------------------------------------------------------------------ dropout


def _dropout_reference(x, p=0.5, seed=-1):
    """Only p = 0 (keep all) and p = 1 (drop all) are deterministic."""
    assert p in (0.0, 1.0)
    mask = np.full(x.shape, 1.0 if p == 0.0 else 0.0)
    return [x * mask, mask]


@op_case("Dropout",
         inputs=lambda rng, dt, shape: [sample(rng, dt, shape)],
         attrs=[{"p": 0.0, "seed": 3}, {"p": 1.0, "seed": 3}],
         reference=_dropout_reference,
         shapes=[(), (0,), (7,), (2, 3, 4)])
def test_dropout_extreme_p(case):
    case.check_forward()


def _dropout(x, **attrs):
    import dragon_core as dg

    y, mask = dg.ops.dropout(dg.from_numpy(x), **attrs)
    return y.numpy(), mask.numpy()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_values_and_rate(dtype, p):
    """mask is 0 or 1/(1-p), y = x * mask, and 1 - p of the elements are
    kept (within 5 standard deviations over 2^17 draws)."""
    n = 1 << 17
    x = np.random.default_rng(0).uniform(0.5, 2.0, n).astype(dtype)
    y, mask = _dropout(x, p=p, seed=11)
    assert y.dtype == mask.dtype == np.dtype(dtype)
    scale = np.asarray(1.0 / (1.0 - p), dtype)
    assert np.all((mask == 0) | (mask == scale))
    np.testing.assert_array_equal(y, x * mask)
    kept = np.count_nonzero(mask) / n
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < 5 * sigma
    # Kept positions are not clustered: both halves keep about 1 - p.
    for half in (mask[: n // 2], mask[n // 2:]):
        assert abs(np.count_nonzero(half) / (n // 2) - (1 - p)) < 5 * sigma * np.sqrt(2)


def test_dropout_masks_of_neighbouring_seeds_are_uncorrelated():
    x = np.ones(1 << 16, np.float32)
    _, a = _dropout(x, p=0.5, seed=1)
    _, b = _dropout(x, p=0.5, seed=2)
    agree = np.mean((a > 0) == (b > 0))
    assert abs(agree - 0.5) < 5 * 0.5 / np.sqrt(x.size)


def test_dropout_seed_reproducible_and_fresh():
    import dragon_core as dg

    x = np.ones((64, 33), np.float32)
    _, a = _dropout(x, p=0.3, seed=5)
    _, b = _dropout(x, p=0.3, seed=5)
    np.testing.assert_array_equal(a, b)
    _, c = _dropout(x, p=0.3)
    _, d = _dropout(x, p=0.3)
    assert not np.array_equal(c, d)
    dg.manual_seed(123)
    _, e = _dropout(x, p=0.3)
    dg.manual_seed(123)
    _, f = _dropout(x, p=0.3)
    np.testing.assert_array_equal(e, f)


def test_dropout_mask_is_a_prefix_property_of_the_seed():
    """Element i depends only on (seed, i): a longer tensor extends the mask
    of a shorter one, and dtype does not change the kept positions."""
    _, short = _dropout(np.ones(1000, np.float32), p=0.4, seed=9)
    _, long = _dropout(np.ones(50000, np.float64), p=0.4, seed=9)
    np.testing.assert_array_equal(short > 0, long[:1000] > 0)


def test_dropout_strided_input():
    base = np.random.default_rng(1).uniform(-1, 1, (8, 10)).astype(np.float32)
    view = base[:, ::2]
    y, mask = _dropout(view, p=0.5, seed=4)
    _, dense_mask = _dropout(np.ascontiguousarray(view), p=0.5, seed=4)
    np.testing.assert_array_equal(mask, dense_mask)
    np.testing.assert_array_equal(y, view * mask)


_HASH_SCRIPT = textwrap.dedent("""
    import hashlib
    import numpy as np
    import dragon_core as dg
    x = dg.from_numpy(np.ones(200003, np.float32))
    print(hashlib.sha256(dg.ops.dropout(x, p=0.3, seed=42)[1].numpy().tobytes()).hexdigest())
""")


def test_dropout_independent_of_thread_count():
    import dragon_core as dg

    x = dg.from_numpy(np.ones(200003, np.float32))
    here = hashlib.sha256(dg.ops.dropout(x, p=0.3, seed=42)[1].numpy().tobytes()).hexdigest()
    for threads in (1, 3):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads),
                   DRAGON_NUM_THREADS=str(threads))
        out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == here


def test_dropout_graph_mode_draws_a_new_mask_per_call():
    import dragon_core as dg

    @dg.function
    def drop(x):
        return dg.ops.dropout(x, p=0.5)

    x = dg.tensor(np.ones((16, 16), np.float32))
    y1, m1 = drop(x)
    y2, m2 = drop(x)
    assert not np.array_equal(m1.numpy(), m2.numpy())
    np.testing.assert_array_equal(y1.numpy(), m1.numpy())
    np.testing.assert_array_equal(y2.numpy(), m2.numpy())
    dg.manual_seed(3)
    _, a = drop(x)
    dg.manual_seed(3)
    _, b = drop(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())

    @dg.function
    def fixed(x):
        return dg.ops.dropout(x, p=0.5, seed=17)[1]

    np.testing.assert_array_equal(fixed(x).numpy(), fixed(x).numpy())


def test_dropout_graph_mode_gradient_uses_the_forward_mask():
    """In a traced step, the backward pass multiplies by the very mask the
    forward pass drew in that run (not by a second draw)."""
    import dragon_core as dg

    @dg.function
    def step(x):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y, mask = dg.ops.dropout(x, p=0.5)
            loss = dg.ops.sum(y * 3.0)
        return mask, tape.gradient(loss, x)

    x = dg.tensor(np.ones((8, 8), np.float32))
    masks = []
    for _ in range(3):
        mask, g = step(x)
        np.testing.assert_array_equal(g.numpy(), 3.0 * mask.numpy())
        masks.append(mask.numpy())
    assert not np.array_equal(masks[0], masks[1])


def test_dropout_mask_needs_no_grad():
    import dragon_core as dg

    x = dg.tensor(np.ones(4, np.float32)).requires_grad_()
    y, mask = dg.ops.dropout(x, p=0.5, seed=1)
    assert y.requires_grad and not mask.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask.numpy())


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_bad_p(p):
    import dragon_core as dg

    with pytest.raises(dg.errors.InvalidArgumentError, match=r"Dropout.*p must be"):
        dg.ops.dropout(dg.tensor(np.ones(3, np.float32)), p=p)


def test_dropout_rejects_integers():
    import dragon_core as dg

    with pytest.raises(dg.errors.InvalidArgumentError, match=r"Dropout.*int32"):
        dg.ops.dropout(dg.tensor(np.ones(3, np.int32)))


# ---------------------------------------------------------------- embedding


def _embedding_reference(weight, indices, padding_idx=-1):
    return weight[indices]


def _embedding_inputs(index_dtype):
    def make(rng, dt, shape):
        weight = sample(rng, dt, (7, 5))
        indices = rng.integers(0, 7, shape).astype(index_dtype)
        return [weight, indices]
    return make


_EMB_SHAPES = [(), (0,), (1,), (6,), (2, 3), (40, 30)]


@op_case("Embedding", inputs=_embedding_inputs("int64"),
         reference=_embedding_reference,
         attrs=[{}, {"padding_idx": 2}],
         dtypes=FLOAT_DTYPES + ("int32", "float16"),
         shapes=_EMB_SHAPES)
def test_embedding_int64(case):
    case.check_forward()


@op_case("Embedding", inputs=_embedding_inputs("int32"),
         reference=_embedding_reference, shapes=_EMB_SHAPES)
def test_embedding_int32(case):
    case.check_forward()


def test_embedding_strided_table():
    import dragon_core as dg

    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    table = base[:, ::2]
    idx = np.array([[5, 0], [3, 3]], np.int64)
    y = dg.ops.embedding(dg.from_numpy(table), dg.from_numpy(idx))
    np.testing.assert_array_equal(y.numpy(), table[idx])


@pytest.mark.parametrize("bad", [7, -1, 100])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_embedding_index_out_of_range(bad, index_dtype):
    import dragon_core as dg

    w = dg.tensor(np.zeros((7, 3), np.float32))
    idx = dg.tensor(np.array([0, bad, 1], index_dtype))
    with pytest.raises(dg.errors.OutOfRangeError,
                       match=rf"Embedding.*index {bad} .*\[0, 7\)"):
        dg.ops.embedding(w, idx)


def test_embedding_bad_table_and_padding():
    import dragon_core as dg

    idx = dg.tensor(np.array([0, 1], np.int64))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"Embedding.*2-D.*\[7\]"):
        dg.ops.embedding(dg.tensor(np.zeros(7, np.float32)), idx)
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"Embedding.*padding_idx 7"):
        dg.ops.embedding(dg.tensor(np.zeros((7, 2), np.float32)), idx,
                         padding_idx=7)
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"Embedding.*float32"):
        dg.ops.embedding(dg.tensor(np.zeros((7, 2), np.float32)),
                         dg.tensor(np.zeros(2, np.float32)))


def test_embedding_and_its_gradient_in_graph_mode():
    import dragon_core as dg

    w = dg.tensor(np.random.default_rng(0).normal(size=(5, 3)))
    idx = dg.tensor(np.array([[4, 0], [4, 2]], np.int64))

    def step(w, idx):
        with dg.GradientTape() as tape:
            tape.watch(w)
            y = dg.ops.embedding(w, idx, padding_idx=0)
            loss = dg.ops.sum(y * y)
        return y, tape.gradient(loss, w)

    eager = step(w, idx)
    traced = dg.function(step)
    for a, b in zip(traced(w, idx), eager):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    g = eager[1].numpy()
    want = np.zeros((5, 3))
    np.add.at(want, [4, 0, 4, 2], 2.0 * w.numpy()[[4, 0, 4, 2]])
    want[0] = 0.0
    np.testing.assert_allclose(g, want, rtol=1e-12)
