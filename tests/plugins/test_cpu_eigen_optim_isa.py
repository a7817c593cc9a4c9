"""cpu_eigen's Adam element loop (plugins/cpu_eigen/src/optim_isa.h,
optim_isa.cc), built per instruction set and chosen at run time (issue 21).

Every build (``DRAGON_CPU_EIGEN_ISA=base|v3`` and the best one, each in a
fresh interpreter) must give the same bits for AdamUpdate and
MultiAdamUpdate, float32 and float64, with and without amsgrad, maximize,
L2 and decoupled weight decay, on lengths that are not multiples of any
vector width; and the result must match a float64 NumPy Adam step. So must
MultiAdamUpdate's non-temporal moment stores (AdamParams::stream, turned on
by ``DRAGON_CPU_EIGEN_ADAM_STREAM=1``).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r"""
import sys
import numpy as np
import dragon_core as dg

rng = np.random.default_rng(0)
sizes = [int(n) for n in sys.argv[2].split(",")] if len(sys.argv) > 2 else [
    1, 7, 16, 33, 1000, 4099]
out = []
for dtype in ("float32", "float64"):
    for flags in ({}, {"amsgrad": True}, {"maximize": True, "weight_decay": 0.1},
                  {"weight_decay": 0.1, "decoupled": True}):
        ts = {r: [rng.standard_normal(n).astype(dtype) for n in sizes]
              for r in ("p", "g", "m", "v", "vmax")}
        for r in ("v", "vmax"):
            ts[r] = [np.abs(a) for a in ts[r]]
        ams = flags.get("amsgrad", False)
        vmax = ([dg.tensor(a) for a in ts["vmax"]] if ams
                else [dg.tensor(np.zeros(0, dtype))] * len(sizes))
        res = dg.ops.multi_adam_update(
            dg.tensor(np.asarray(1e-2, dtype)),
            [dg.tensor(a) for r in ("p", "g", "m", "v") for a in ts[r]] + vmax
            + [dg.tensor(np.asarray(3.0, dtype))] * len(sizes), **flags)
        got = [r.numpy() for r in res[:4 * len(sizes)]]
        j = len(sizes) - 1
        single = dg.ops.adam_update(dg.tensor(ts["p"][j]), dg.tensor(ts["g"][j]),
                                    dg.tensor(ts["m"][j]), dg.tensor(ts["v"][j]),
                                    vmax[j], dg.tensor(np.asarray(1e-2, dtype)),
                                    dg.tensor(np.asarray(3.0, dtype)), **flags)
        for r, role in enumerate(single[:3]):      # p, m, v: single == multi
            assert role.numpy().tobytes() == got[r * len(sizes) + j].tobytes(), (
                "single != multi", r)
        out.append(np.concatenate([a.ravel().astype(np.float64) for a in got]))
        out.append(np.concatenate([ts[r][k].astype(np.float64) for r in ("p", "g", "m", "v",
                                   "vmax") for k in range(len(sizes))]))
np.save(sys.argv[1], np.array(out, dtype=object), allow_pickle=True)
"""


def _run(tmp_path, isa, stream=None, sizes=None):
    env = dict(os.environ)
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    env.pop("DRAGON_CPU_EIGEN_ADAM_STREAM", None)
    if isa:
        env["DRAGON_CPU_EIGEN_ISA"] = isa
    if stream is not None:
        env["DRAGON_CPU_EIGEN_ADAM_STREAM"] = stream
    path = tmp_path / f"adam_{isa or 'best'}_{stream}_{len(sizes or ())}.npy"
    args = [sys.executable, "-c", SCRIPT, str(path)]
    if sizes:
        args.append(",".join(map(str, sizes)))
    subprocess.run(args, env=env, check=True, timeout=300)
    return np.load(path, allow_pickle=True)


def _adam64(p, g, m, v, vmax, lr=1e-2, step=3.0, beta1=0.9, beta2=0.999, eps=1e-8,
            weight_decay=0.0, decoupled=False, amsgrad=False, maximize=False):
    d = -g if maximize else g
    if weight_decay and not decoupled:
        d = d + weight_decay * p
    m2 = beta1 * m + (1 - beta1) * d
    v2 = beta2 * v + (1 - beta2) * d * d
    s = np.maximum(vmax, v2) if amsgrad else v2
    den = np.sqrt(s) / np.sqrt(1 - beta2 ** step) + eps
    shrink = 1 - lr * weight_decay if decoupled else 1.0
    return p * shrink - lr / (1 - beta1 ** step) * m2 / den, m2, v2


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the per-instruction-set builds exist on x86-64 only")
def test_adam_builds_agree_bitwise_and_with_float64(tmp_path):
    best = _run(tmp_path, None)
    for isa in ("base", "v3"):
        other = _run(tmp_path, isa)
        for a, b in zip(best, other):
            assert a.tobytes() == b.tobytes(), f"DRAGON_CPU_EIGEN_ISA={isa} differs"
    sizes = [1, 7, 16, 33, 1000, 4099]
    flag_sets = ({}, {"amsgrad": True}, {"maximize": True, "weight_decay": 0.1},
                 {"weight_decay": 0.1, "decoupled": True})
    k = 0
    for dtype in ("float32", "float64"):
        tol = 2e-6 if dtype == "float32" else 1e-13
        for flags in flag_sets:
            got, inputs = best[k], best[k + 1]
            k += 2
            n = sum(sizes)
            p, g, m, v, vmax = (inputs[i * n:(i + 1) * n] for i in range(5))
            want_p, want_m, want_v = _adam64(p, g, m, v, vmax, **flags)
            np.testing.assert_allclose(got[:n], want_p, rtol=tol, atol=tol)
            np.testing.assert_allclose(got[n:2 * n], want_m, rtol=tol, atol=tol)
            np.testing.assert_allclose(got[2 * n:3 * n], want_v, rtol=tol, atol=tol)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the per-instruction-set builds exist on x86-64 only")
@pytest.mark.parametrize("isa", [None, "v3", "base"])
def test_streaming_stores_give_the_same_bits(tmp_path, isa):
    """Non-temporal moment stores (forced on at every size) write the same
    values as normal stores (forced off), in every build; AdamUpdate (normal
    stores) still equals MultiAdamUpdate (the script asserts it)."""
    off = _run(tmp_path, isa, "0")
    on = _run(tmp_path, isa, "1")
    for a, b in zip(off, on):
        assert a.tobytes() == b.tobytes()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the per-instruction-set builds exist on x86-64 only")
def test_large_state_with_streaming_stores(tmp_path):
    """A state of 2^18 + 3009 elements in one call, as a model's: streaming
    stores give the bits of normal ones (and of the default), and the step
    matches float64 NumPy."""
    sizes = [3, 2 ** 17 + 5, 2 ** 17 + 3001]
    on = _run(tmp_path, None, "1", sizes)
    default = _run(tmp_path, None, None, sizes)
    for a, b in zip(on, default):
        assert a.tobytes() == b.tobytes()
    n = sum(sizes)
    for k, tol in ((0, 2e-6), (8, 1e-13)):        # float32 and float64, no flags
        got, inputs = on[k], on[k + 1]
        p, g, m, v, vmax = (inputs[i * n:(i + 1) * n] for i in range(5))
        want_p, want_m, want_v = _adam64(p, g, m, v, vmax)
        np.testing.assert_allclose(got[:n], want_p, rtol=tol, atol=tol)
        np.testing.assert_allclose(got[n:2 * n], want_m, rtol=tol, atol=tol)
        np.testing.assert_allclose(got[2 * n:3 * n], want_v, rtol=tol, atol=tol)
