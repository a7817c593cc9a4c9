"""Gradient rules of the collective ops (dragon_core/_grads/collective.py)
in a world of one process. The 2-rank checks against NumPy finite
differences are tests/distributed/test_collective_grads.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

OPS = {"CollectiveAllReduce": "all_reduce", "CollectiveBroadcast": "broadcast",
       "CollectiveAllGather": "all_gather", "CollectiveReduceScatter": "reduce_scatter",
       "CollectiveAllToAll": "all_to_all"}

CODE = """
import numpy as np, dragon_core as dg, dragon_core.distributed as dist
from dragon_core.distributed import nn as dnn
dist.init_process_group()
rng = np.random.default_rng(0)
for kind in {kinds!r}:
    for dtype in ("float32", "float64"):
        x = dg.tensor(rng.standard_normal((4, 3)).astype(dtype))
        y_like = {{"all_gather": (1, 4, 3)}}.get(kind, (4, 3))
        w = rng.standard_normal(y_like).astype(dtype)
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = getattr(dnn, kind)(x)
            loss = dg.ops.sum(y * dg.tensor(w))
        g = tape.gradient(loss, x).numpy()
        assert g.dtype == np.dtype(dtype), (kind, g.dtype)
        # world of one: every collective is the identity (all_gather adds an axis)
        np.testing.assert_allclose(g, w.reshape(4, 3), rtol=1e-6)
    print("OK", kind)
"""


@pytest.mark.parametrize("op", sorted(OPS))
def test_collective_gradient_in_a_world_of_one(op):
    pytest.importorskip("dragon_nccl_dist")
    p = subprocess.run([sys.executable, "-c", CODE.format(kinds=[OPS[op]])],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split() == ["OK", OPS[op]]
