"""BatchNormStatsUpdate on cuda (src/bn_stats.cu), GPU-checked against the
cpu kernel and a float64 NumPy reference; and the running-statistics update
of a compiled BatchNorm2d training step on cuda against the same step on
the cpu. Written without a GPU (session of 2026-11-27): the ``gpu`` tests
skip here and run on the GPU machine. The registration itself is checked
here (no device needed).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import nn

from _host_cpp import run_program


def test_kernel_is_registered_for_every_float_dtype():
    kernels = [k for k in dg.plugins.kernels("BatchNormStatsUpdate") if k["plugin"] == "cuda"]
    assert kernels, dg.plugins.kernels("BatchNormStatsUpdate")
    text = str(kernels)
    for dt in ("float32", "float64", "float16", "bfloat16"):
        assert dt in text, text


def _ref(rm, rv, bm, bv, momentum, count):
    return [(1 - momentum) * rm + momentum * bm,
            (1 - momentum) * rv + momentum * bv * count / (count - 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [0, 1, 64, 1000])
def test_matches_cpu_and_reference(gpu, dtype, n):
    rng = np.random.default_rng(n)
    arrays = [rng.uniform(-2, 2, n), rng.uniform(0.5, 2, n), rng.uniform(-2, 2, n),
              rng.uniform(0.1, 3, n)]
    cpu = [dg.tensor(a.astype(np.float32)).to(dtype) for a in arrays]
    dev = [t.to("cuda") for t in cpu]
    want_cpu = dg.ops.batch_norm_stats_update(*cpu, momentum=0.3, count=37)
    got = dg.ops.batch_norm_stats_update(*dev, momentum=0.3, count=37)
    ref = _ref(*[t.to("float64").numpy() for t in cpu], 0.3, 37)
    for g, c, r in zip(got, want_cpu, ref):
        assert str(g.device).startswith("cuda") and g.dtype == dtype
        g64 = g.to("cpu").to("float64").numpy()
        # Both compute in double and round once: the same bits.
        np.testing.assert_array_equal(g64, c.to("float64").numpy())
        np.testing.assert_allclose(g64, r, rtol={"bfloat16": 1e-2, "float16": 1e-3}.get(dtype,
                                                                                        1e-6))


@pytest.mark.gpu
def test_compiled_batchnorm_step_updates_running_stats_like_cpu(gpu):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 6, 6)).astype(np.float32)
    out = {}
    for dev in ("cpu", "cuda"):
        bn = nn.BatchNorm2d(3, momentum=0.2)
        bn.train()
        bn.to(dev)
        f = dg.function(lambda v, m=bn: m(v))
        for _ in range(3):
            f(dg.tensor(x).to(dev))
        out[dev] = (bn.running_mean.to("cpu").numpy(), bn.running_var.to("cpu").numpy())
    for a, b in zip(out["cpu"], out["cuda"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------- host-side rule

HOST_PROGRAM = r"""
#include <cstdio>
#include "bn_stats.h"

// Reads lines "rm rv bm bv m unbias" (hex doubles), prints "mean var".
int main() {
  double rm, rv, bm, bv, m, unbias;
  long count = 0;
  while (std::scanf("%la %la %la %la %la %la", &rm, &rv, &bm, &bv, &m, &unbias) == 6) {
    const dragon_cuda::BnStatsValue v =
        dragon_cuda::BatchNormStatsStep(rm, rv, bm, bv, m, unbias);
    std::printf("%a %a\n", v.mean, v.var);
    ++count;
  }
  std::printf(count ? "OK\n" : "no input\n");
  return count ? 0 : 1;
}
"""


def test_device_rule_gives_the_cpu_kernels_bits(tmp_path):
    """bn_stats.h (what the cuda kernel runs per element, its roundings
    explicit) compiled on the host equals cpu_eigen's float64 kernel bit for
    bit over momenta, counts and magnitudes; the float32 and 16-bit results
    round these doubles once more, as the cpu kernel does. Compiled with
    -ffp-contract=off: the host build must not fuse either (the device's
    intrinsics never do)."""
    rng = np.random.default_rng(11)
    cases = [(0.1, 37), (0.3, 2), (0.01, 1000003), (1.0, 5), (0.0, 3), (0.7, 64),
             (1 / 3, 7)]
    n = 400
    blocks, lines = [], []
    for momentum, count in cases:
        scale = 10.0 ** rng.integers(-30, 30, (4, n))
        arrays = [rng.standard_normal(n) * scale[0], rng.uniform(0, 1, n) * scale[1],
                  rng.standard_normal(n) * scale[2], rng.uniform(0, 1, n) * scale[3]]
        unbias = float(count) / float(count - 1)
        blocks.append((arrays, momentum, count))
        for k in range(n):
            vals = [a[k] for a in arrays] + [momentum, unbias]
            lines.append(" ".join(float(v).hex() for v in vals))
    # run_program gives the program no stdin: it reads the input file.
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    program = HOST_PROGRAM.replace("int main() {", "int main() {\n  if (!std::freopen(\"" +
                                   str(tmp_path / "input.txt") + "\", \"r\", stdin)) return 3;")
    out = run_program(tmp_path, "bn_stats_rule", program, flags=("-O2", "-ffp-contract=off"))
    got = [tuple(float.fromhex(w) for w in line.split()) for line in out.splitlines()[:-1]]
    assert len(got) == len(lines)
    for b, (arrays, momentum, count) in enumerate(blocks):
        want = dg.ops.batch_norm_stats_update(*[dg.tensor(a) for a in arrays],
                                              momentum=momentum, count=count)
        mine = np.array(got[b * n:(b + 1) * n])
        for j, w in enumerate(want):
            np.testing.assert_array_equal(mine[:, j].view(np.uint64), w.numpy().view(np.uint64),
                                          err_msg=f"momentum {momentum}, count {count}, "
                                                  f"output {j}")
