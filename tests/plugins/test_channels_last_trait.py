"""The kernel trait DG_KERNEL_CHANNELS_LAST (ABI 1.6, docs/abi.md): the
eager dispatcher hands such a kernel a channels-last input 0 as is and
allocates output 0 channels-last; other layouts of input 0 still arrive
dense; a compiled function's planned outputs stay contiguous. The fixture
kernel (fixtures/layout_probe) reads through strides and reports them."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def probe(dg, fixture_plugins):
    dg.load_library(str(fixture_plugins["layout_probe"]))
    return dg.ops.layout_probe


def _inputs(dg, shape=(2, 3, 4, 5)):
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.uniform(-1, 1, shape).astype(np.float32))
    b = dg.tensor(rng.uniform(-1, 1, shape[1]).astype(np.float32))
    return x, b, x.numpy() + b.numpy()[None, :, None, None]


def test_channels_last_input_reaches_the_kernel_and_output_follows(dg, probe):
    x, b, ref = _inputs(dg)
    y, info = probe(x.contiguous(dg.channels_last), b)
    assert [int(v) for v in info.numpy()] == [1, 1, 1]
    assert y.is_contiguous(dg.channels_last) and not y.is_contiguous()
    np.testing.assert_array_equal(y.numpy(), ref)


def test_contiguous_input_gives_contiguous_output(dg, probe):
    x, b, ref = _inputs(dg)
    y, info = probe(x, b)
    assert [int(v) for v in info.numpy()] == [20, 20, 0]
    assert y.is_contiguous()
    np.testing.assert_array_equal(y.numpy(), ref)


def test_other_strides_are_made_dense(dg, probe):
    x, b, _ = _inputs(dg, (2, 3, 4, 10))
    sliced = x[:, :, :, ::2]            # neither layout: a dense copy
    y, info = probe(sliced, b)
    assert [int(v) for v in info.numpy()] == [20, 20, 0]
    np.testing.assert_array_equal(y.numpy(), sliced.numpy() + b.numpy()[None, :, None, None])
    hw = dg.ops.transpose(x, (0, 1, 3, 2))  # H and W swapped: dense copy too
    y, info = probe(hw, b)
    assert [int(v) for v in info.numpy()] == [40, 40, 0]
    np.testing.assert_array_equal(y.numpy(), hw.numpy() + b.numpy()[None, :, None, None])


def test_ambiguous_channels_last_stays_default(dg, probe):
    """C == 1: channels-last and contiguous at once; the output is the
    default layout (the same bytes)."""
    x, b, ref = _inputs(dg, (2, 1, 4, 5))
    y, info = probe(x.contiguous(dg.channels_last), b)
    assert y.is_contiguous()
    np.testing.assert_array_equal(y.numpy(), ref)


def test_compiled_function_is_correct_with_contiguous_plan(dg, probe):
    x, b, ref = _inputs(dg)

    @dg.function
    def f(x, b):
        y, info = probe(x, b)
        return y * 2.0, info

    y, _ = f(x.contiguous(dg.channels_last), b)
    np.testing.assert_allclose(y.numpy(), 2 * ref, rtol=1e-6)
    y2, _ = f(x, b)
    np.testing.assert_allclose(y2.numpy(), 2 * ref, rtol=1e-6)


def test_gradient_through_a_trait_kernel_output(dg, probe):
    """Ops after a channels-last output see it as any strided tensor."""
    x, b, ref = _inputs(dg)
    y, _ = probe(x.contiguous(dg.channels_last), b)
    z = dg.ops.softmax(y, axis=1)
    zr = np.exp(ref) / np.exp(ref).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(z.numpy(), zr, rtol=1e-5)
