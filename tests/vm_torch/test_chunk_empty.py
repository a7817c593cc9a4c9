"""torch.chunk against real torch 2.13, empty dims included (an empty dim
gives ``chunks`` empty pieces; it gave one: found by the fuzz run at
DRAGON_FUZZ_OFFSET=63352)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402


@pytest.mark.parametrize("shape,chunks,dim", [((0,), 3, 0), ((0,), 1, 0), ((2, 0), 3, 1),
                                              ((0, 4), 3, 1), ((0, 4), 2, 0), ((5,), 3, 0),
                                              ((6,), 4, 0), ((3,), 5, 0), ((1,), 3, -1)])
def test_chunk_as_torch(shape, chunks, dim):
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    ref = torch.from_numpy(a).chunk(chunks, dim)
    got = vt.from_numpy(a).chunk(chunks, dim)
    assert [tuple(g.shape) for g in got] == [tuple(r.shape) for r in ref]
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g.numpy(), r.numpy())


@pytest.mark.parametrize("chunks,exc", [(0, RuntimeError), (-1, RuntimeError), (2.0, TypeError)])
def test_chunk_bad_count_raises(chunks, exc):
    with pytest.raises(exc):
        torch.arange(4).chunk(chunks)
    with pytest.raises(exc, match="chunk"):
        vt.arange(4).chunk(chunks)
