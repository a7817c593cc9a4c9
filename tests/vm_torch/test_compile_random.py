"""Random creation inside ``torch.compile`` draws at every call: randint and
randperm were drawn on the host while tracing and became constants of the
plan (the same numbers at every call); multinomial, which can only draw on
the host, raises inside a trace instead of repeating one sample."""
import numpy as np
import pytest

from dragon_core.vm import torch


def _calls(fn, arg, n=4):
    c = torch.compile(fn)
    return [c(arg).numpy() for _ in range(n)]


def test_randint_in_compile_draws_at_every_call():
    outs = _calls(lambda x: torch.randint(0, 1000, (16,)), torch.zeros(1))
    assert len({o.tobytes() for o in outs}) == len(outs)
    for o in outs:
        assert o.dtype == np.int64 and o.shape == (16,)
        assert o.min() >= 0 and o.max() < 1000


def test_randint_in_compile_covers_its_range_uniformly():
    (o,) = _calls(lambda x: torch.randint(-3, 2, (20000,), dtype=torch.int32),
                  torch.zeros(1), n=1)
    assert o.dtype == np.int32
    counts = np.bincount(o + 3, minlength=5)
    assert counts.size == 5                      # nothing outside [-3, 2)
    # each of the 5 values about 4000 times (binomial sd ~57)
    assert np.all(np.abs(counts - 4000) < 400), counts


def test_randint_in_compile_rejects_an_empty_range():
    c = torch.compile(lambda x: torch.randint(3, 3, (2,)))
    with pytest.raises(Exception, match="low < high"):
        c(torch.zeros(1))


def test_randperm_in_compile_is_a_fresh_permutation_at_every_call():
    outs = _calls(lambda x: torch.randperm(50), torch.zeros(1))
    for o in outs:
        assert o.dtype == np.int64
        assert sorted(o.tolist()) == list(range(50))
    assert len({o.tobytes() for o in outs}) == len(outs)


def test_multinomial_in_compile_raises_instead_of_repeating_one_sample():
    p = torch.tensor([0.2, 0.3, 0.5])
    c = torch.compile(lambda p: torch.multinomial(p, 2))
    with pytest.raises(RuntimeError, match="multinomial.*compile"):
        c(p)
    # eagerly it samples as before
    assert torch.multinomial(p, 2).shape == (2,)
