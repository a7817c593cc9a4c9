"""vm.torch DataLoader workers: a sampler that repeats indices
(``RandomSampler(replacement=True)``) gets new random numbers on every visit."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_core.vm import torch as vt
from dragon_core.vm.torch.utils.data import DataLoader, RandomSampler
from _torch_data_helpers import VtDraws


def _batch(num_workers, sampler_seed=0, loader_seed=7):
    vt.manual_seed(sampler_seed)
    sampler = RandomSampler(VtDraws(), replacement=True, num_samples=12)
    loader = DataLoader(VtDraws(), batch_size=12, sampler=sampler, num_workers=num_workers,
                        generator=vt.Generator().manual_seed(loader_seed))
    return next(iter(loader)).numpy()


@pytest.mark.parametrize("num_workers", [1, 2])
def test_random_sampler_with_replacement_draws_anew_for_each_visit(num_workers):
    b = _batch(num_workers)
    idx = b[:, 0].astype(int).tolist()
    assert len(set(idx)) < len(idx)            # the sampler did repeat indices
    for k, name in ((1, "torch.rand"), (2, "np.random"), (3, "random")):
        assert len(set(b[:, k].tolist())) == 12, f"{name}: a repeated index repeats its draws"
    assert np.array_equal(b, _batch(3 - num_workers))    # whatever num_workers
