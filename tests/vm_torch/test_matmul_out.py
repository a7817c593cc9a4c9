"""``out=`` of torch.mm / matmul / bmm / addmm (was a TypeError): the result
is written into ``out`` and ``out`` is returned, with torch 2.13's checks;
what torch does and we cannot (resize an out's storage) raises."""

import warnings

import numpy as np
import pytest

import dragon_core.vm.torch as dt

torch = pytest.importorskip("torch")

CALLS = {
    "mm": (lambda T, a, b, c, out: T.mm(a, b, out=out), (2, 3), (3, 4), (2, 4)),
    "matmul": (lambda T, a, b, c, out: T.matmul(a, b, out=out), (5, 2, 3), (3, 4), (5, 2, 4)),
    "bmm": (lambda T, a, b, c, out: T.bmm(a, b, out=out), (5, 2, 3), (5, 3, 4), (5, 2, 4)),
    "addmm": (lambda T, a, b, c, out: T.addmm(c, a, b, beta=0.5, alpha=2.0, out=out),
              (2, 3), (3, 4), (2, 4)),
}


def _inputs(T, sa, sb, sc):
    rng = np.random.default_rng(0)
    return [T.tensor(rng.standard_normal(s).astype(np.float32)) for s in (sa, sb, sc)]


@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_is_written_and_returned(name):
    fn, sa, sb, sc = CALLS[name]
    res = {}
    for T in (dt, torch):
        a, b, c = _inputs(T, sa, sb, sc)
        out = T.full(sc, 7.0)
        r = fn(T, a, b, c, out)
        assert r is out
        res[T] = out.numpy().copy()
    np.testing.assert_allclose(res[dt], res[torch], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_with_another_shape_of_as_many_elements_is_reshaped(name):
    fn, sa, sb, sc = CALLS[name]
    for T in (dt, torch):
        a, b, c = _inputs(T, sa, sb, sc)
        out = T.zeros(int(np.prod(sc)))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn(T, a, b, c, out)
        assert r is out and tuple(out.shape) == sc
        assert any("was resized" in str(x.message) for x in w)


def test_out_refuses_what_torch_refuses():
    a, b = dt.ones(2, 3), dt.ones(3, 4)
    with pytest.raises(RuntimeError, match="dtype"):
        dt.mm(a, b, out=dt.empty(2, 4, dtype=dt.float64))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        dt.mm(dt.ones(2, 3, requires_grad=True), b, out=dt.empty(2, 4))
    with dt.no_grad():   # under no_grad torch allows it
        assert dt.mm(dt.ones(2, 3, requires_grad=True), b, out=dt.empty(2, 4)).sum().item() == 24


def test_out_of_another_number_of_elements_raises_clearly():
    # torch resizes out's storage (an empty out is its idiom); we cannot
    with pytest.raises(RuntimeError, match=r"mm\(\): out has shape \[0\].*\[2, 4\].*does not "
                                           "resize"):
        dt.mm(dt.ones(2, 3), dt.ones(3, 4), out=dt.empty(0))
