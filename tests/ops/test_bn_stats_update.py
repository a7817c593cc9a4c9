"""BatchNormStatsUpdate: a training-mode BatchNorm's running-statistics update.

``running_mean' = (1 - m) running_mean + m batch_mean`` and ``running_var' =
(1 - m) running_var + m batch_var n / (n - 1)`` (PyTorch's rule, the batch
variance made unbiased), one op with momentum and n as attributes. Checked
against a float64 NumPy reference (float32/float64 exact to rounding,
float16/bfloat16 computed in float), on vectors, a 0-d value and empty
inputs, eager and compiled; bad attributes and shapes raise errors naming
the op; ``nn.BatchNorm2d`` running statistics follow torch's over several
training steps, eagerly and in a compiled step (where the update is one op
per layer and a state update of the graph).
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import FLOAT_DTYPES, check_bad_inputs, op_case

import dragon_core as dg
from dragon_core import nn


def stats_update_ref(rm, rv, bm, bv, momentum=0.1, count=2):
    m = float(momentum)
    return [(1 - m) * rm + m * bm, (1 - m) * rv + m * bv * count / (count - 1)]


def _inputs(rng, dt, shape):
    return [rng.uniform(-2, 2, shape).astype(dt), rng.uniform(0.5, 2, shape).astype(dt),
            rng.uniform(-2, 2, shape).astype(dt), rng.uniform(0.1, 3, shape).astype(dt)]


ATTRS = [{}, {"momentum": 0.0}, {"momentum": 1.0, "count": 7},
         {"momentum": 0.01, "count": 4096}, {"momentum": 0.3, "count": 3}]


@op_case("BatchNormStatsUpdate", inputs=_inputs, reference=stats_update_ref, attrs=ATTRS,
         dtypes=FLOAT_DTYPES, shapes=[(5,), (64,), (), (0,)], tol=2)
def test_stats_update(case):
    case.check_forward()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_round_once(dtype):
    """16-bit inputs: the float64 result rounded once (the kernel widens)."""
    rng = np.random.default_rng(1)
    arrays = _inputs(rng, np.float32, (33,))
    ts = [dg.tensor(a).to(dtype) for a in arrays]
    got = dg.ops.batch_norm_stats_update(*ts, momentum=0.2, count=10)
    want = stats_update_ref(*[t.to("float64").numpy() for t in ts], momentum=0.2, count=10)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.to("float64").numpy(), w, rtol=1e-2 if dtype == "bfloat16"
                                   else 1e-3)


def test_bad_inputs_name_the_op():
    rng = np.random.default_rng(2)
    check_bad_inputs("BatchNormStatsUpdate", _inputs(rng, np.float32, (4,)), count=8)
    x = dg.tensor(np.ones(4, np.float32))
    for kwargs, text in [({"momentum": 1.5}, "momentum"), ({"momentum": -0.1}, "momentum"),
                         ({"count": 1}, "count")]:
        with pytest.raises(ValueError, match=text) as err:
            dg.ops.batch_norm_stats_update(x, x, x, x, **kwargs)
        assert "BatchNormStatsUpdate" in str(err.value)
    with pytest.raises(ValueError, match="batch_var has shape") as err:
        dg.ops.batch_norm_stats_update(x, x, x, dg.tensor(np.ones(3, np.float32)))
    assert "BatchNormStatsUpdate" in str(err.value)
    with pytest.raises(Exception, match="BatchNormStatsUpdate"):
        dg.ops.batch_norm_stats_update(x, x, x, dg.tensor(np.ones(4, np.float64)))


def test_not_differentiable():
    """A no-grad op: its outputs are constants to the tape (no gradient
    flows to any input)."""
    x = dg.tensor(np.ones(3, np.float32))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.batch_norm_stats_update(x, x, x, x, count=4)[0]
        z = dg.ops.sum(y)
    assert tape.gradient(z, [x]) == [None]


def _torch():
    return pytest.importorskip("torch")


def _models(torch):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
    d = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6, momentum=0.3))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1, bias=False),
                            torch.nn.BatchNorm2d(6, momentum=0.3))
    d[0].weight.assign(dg.tensor(w))
    with torch.no_grad():
        t[0].weight.copy_(torch.from_numpy(w))
    d.train()
    t.train()
    return d, t


@pytest.mark.parametrize("compiled", [False, True])
def test_batchnorm2d_running_stats_follow_torch(compiled):
    """Five training forward passes: running mean and variance equal
    torch's (float32, computed in double by both and rounded once)."""
    torch = _torch()
    d, t = _models(torch)
    fwd = dg.function(lambda v: d(v)) if compiled else d
    rng = np.random.default_rng(4)
    for _ in range(5):
        x = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
        fwd(dg.tensor(x))
        t(torch.from_numpy(x))
    bn_d, bn_t = d[1], t[1]
    np.testing.assert_allclose(bn_d.running_mean.numpy(), bn_t.running_mean.numpy(),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bn_d.running_var.numpy(), bn_t.running_var.numpy(),
                               rtol=1e-6, atol=1e-7)


def test_compiled_step_updates_with_one_op_per_layer():
    """The traced graph of a training forward has one BatchNormStatsUpdate
    per batch-norm layer and no element-wise arithmetic for it."""
    d = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.Conv2d(4, 4, 3, bias=False), nn.BatchNorm2d(4))
    d.train()
    f = dg.function(lambda v: d(v))
    x = dg.tensor(np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32))
    types = [o.type for o in f.get_graph(x).op]
    assert types.count("BatchNormStatsUpdate") == 2, types
    assert not {"Mul", "Add", "FusedElementwise"} & set(types), types


def test_stats_update_in_graph_matches_eager():
    rng = np.random.default_rng(6)
    ts = [dg.tensor(a) for a in _inputs(rng, np.float32, (16,))]
    eager = [o.numpy() for o in dg.ops.batch_norm_stats_update(*ts, momentum=0.25, count=12)]
    f = dg.function(lambda *a: dg.ops.batch_norm_stats_update(*a, momentum=0.25, count=12))
    graph = [o.numpy() for o in f(*ts)]
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(e, g)
