"""cpu_eigen's float32 batched small-GEMM (MatMulBatchedF32Avx512, issue 21).

The kernel (plugins/cpu_eigen/src/matmul.cc, src/gemm/batched_f32.cc) serves
batches of small float32 products (attention's q k^T, p v and their
gradients) at priority 20 on x86-64-v4 CPUs, each thread taking whole batch
items. These tests check, against float64 NumPy on the same float32 values:

* the float32 FMA chain over k errs by at most (k + 1) 2**-24 sum_p |a b|
  per output;
* layouts: dense, transpose_a / transpose_b, permuted (attention-shaped)
  views, a B with no unit stride, broadcast batch axes, odd sizes that are
  not multiples of the 6 x 64 register tile, k = 0, empty and 1-item
  batches, and items at the edges of the measured class;
* the same bits for 1, 2 and 3 threads;
* dispatch: explain() names the kernel, the attention products go to it by
  default (no oneDNN matmul in ONEDNN_VERBOSE), products outside the class
  do not, and DRAGON_CPU_EIGEN_BATCHED_GEMM=off / all switch it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import plugins

U32 = 2.0 ** -24
NAME = "MatMulBatchedF32Avx512"
KERNELS = {k["name"] for k in plugins.kernels("MatMul") if k["device"] == "cpu"}


def _cpu_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl"))


# Built on every x86-64 (CMakeLists.txt), served where the CPU has AVX-512.
X86 = platform.machine() in ("x86_64", "AMD64", "amd64")
HAS = X86 and _cpu_has_avx512()
needs_kernel = pytest.mark.skipif(not HAS, reason="no AVX-512 on this CPU")
# DRAGON_CPU_EIGEN_BATCHED_GEMM=all: the kernel takes every call it can
# compute (1-item batches, k = 0, sides outside [8, 256]);
# test_every_case_on_the_kernel reruns this file so.
ALL = os.environ.get("DRAGON_CPU_EIGEN_BATCHED_GEMM") == "all"


@pytest.fixture
def rng():
    return np.random.default_rng(2121)


@pytest.fixture
def ours():
    """Pin the batched kernel first (calls it declines go to the next)."""
    plugins.pin("MatMul", "cpu", NAME)
    yield
    plugins.unpin("MatMul", "cpu")


def _f32(rng, shape):
    a = rng.standard_normal(shape).astype(np.float32)
    return dg.tensor(a), a.astype(np.float64)


def _check(y, ref, an, bn):
    """|y - ref| <= (k + 1) u sum_p |a||b| (ref, an, bn already in the
    logical layout, float64)."""
    y = np.asarray(y, dtype=np.float64)
    assert y.shape == ref.shape, (y.shape, ref.shape)
    k = an.shape[-1]
    bound = (k + 1) * U32 * np.matmul(np.abs(an), np.abs(bn)) + 1e-30
    err = np.abs(y - ref)
    assert np.all(err <= bound), float((err / bound).max())


def _perm_view(rng, logical_shape, perm):
    """A strided view of logical shape `logical_shape` made by transposing a
    dense base with `perm` (as the encoder's head split does)."""
    base_shape = [0] * len(logical_shape)
    for i, p in enumerate(perm):
        base_shape[p] = logical_shape[i]
    base, base64 = _f32(rng, base_shape)
    return dg.ops.transpose(base, perm), np.transpose(base64, perm)


# ------------------------------------------------------------ correctness

ATTN = [  # (a shape, b shape, transpose_a, transpose_b): batch 2 x 3 heads
    ((2, 3, 128, 64), (2, 3, 128, 64), False, True),    # q k^T
    ((2, 3, 128, 128), (2, 3, 128, 64), False, False),  # p v
    ((2, 3, 128, 128), (2, 3, 128, 64), True, False),   # p^T dO
    ((2, 3, 128, 64), (2, 3, 128, 64), True, False),    # dS^T q-like
]


@needs_kernel
@pytest.mark.parametrize("sa,sb,ta,tb", ATTN)
@pytest.mark.parametrize("views", ["dense", "permuted"])
def test_attention_products(ours, rng, sa, sb, ta, tb, views):
    if views == "dense":
        a, an = _f32(rng, sa)
        b, bn = _f32(rng, sb)
    else:  # [B, H, S, D] views of [B, S, H, D] tensors
        a, an = _perm_view(rng, sa, [0, 2, 1, 3])
        b, bn = _perm_view(rng, sb, [0, 2, 1, 3])
    la = np.swapaxes(an, -1, -2) if ta else an
    lb = np.swapaxes(bn, -1, -2) if tb else bn
    y = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy()
    _check(y, np.matmul(la, lb), la, lb)


EDGES = [  # odd sizes (tile remainders), inside [8, 256]
    ((3, 8, 9), (3, 9, 8)),
    ((5, 37, 33), (5, 33, 45)),
    ((4, 97, 32), (4, 32, 100)),
    ((3, 256, 256), (3, 256, 256)),
    ((6, 32, 250), (6, 250, 32)),
    ((2, 131, 65), (2, 65, 79)),
]


@needs_kernel
@pytest.mark.parametrize("sa,sb", EDGES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_odd_sizes_and_layouts(ours, rng, sa, sb, ta, tb):
    a, an = _f32(rng, sa)
    b, bn = _f32(rng, sb)
    if ta:  # store A transposed, ask for the transpose back
        a = dg.tensor(np.ascontiguousarray(np.swapaxes(an, -1, -2)).astype(np.float32))
    if tb:
        b = dg.tensor(np.ascontiguousarray(np.swapaxes(bn, -1, -2)).astype(np.float32))
    y = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy()
    _check(y, np.matmul(an, bn), an, bn)


@needs_kernel
def test_b_without_unit_stride(ours, rng):
    """A B whose matrices have no unit stride (every second element) is
    packed; an A likewise is read through its strides."""
    base_a, an_full = _f32(rng, (4, 40, 96))
    base_b, bn_full = _f32(rng, (4, 48, 70))
    a = dg.ops.slice(base_a, [0, 0, 0], [4, 40, 96], [1, 1, 2])
    b = dg.ops.slice(base_b, [0, 0, 0], [4, 48, 70], [1, 1, 2])
    an, bn = an_full[:, :, ::2], bn_full[:, :, ::2]
    bn = bn[:, :, :35]
    b = dg.ops.slice(b, [0, 0, 0], [4, 48, 35], [1, 1, 1])
    y = dg.ops.matmul(a, b).numpy()
    _check(y, np.matmul(an, bn), an, bn)


@needs_kernel
@pytest.mark.parametrize("sa,sb", [
    ((3, 4, 64, 48), (48, 80)),        # B shared by every item
    ((1, 64, 48), (5, 48, 80)),        # A broadcast over B's batch
    ((3, 1, 64, 48), (1, 4, 48, 80)),  # both broadcast
    ((2, 64, 48), (3, 1, 48, 80)),     # ranks differ
])
def test_broadcast_batch(ours, rng, sa, sb):
    a, an = _f32(rng, sa)
    b, bn = _f32(rng, sb)
    y = dg.ops.matmul(a, b).numpy()
    _check(y, np.matmul(an, bn), an, bn)


@needs_kernel
def test_empty_one_item_and_k_zero(ours, rng):
    a, _ = _f32(rng, (0, 64, 32))
    b, _ = _f32(rng, (0, 32, 64))
    assert dg.ops.matmul(a, b).numpy().shape == (0, 64, 64)
    a, an = _f32(rng, (1, 64, 32))
    b, bn = _f32(rng, (1, 32, 64))
    _check(dg.ops.matmul(a, b).numpy(), np.matmul(an, bn), an, bn)
    a, _ = _f32(rng, (4, 40, 0))
    b, _ = _f32(rng, (4, 0, 48))
    y = dg.ops.matmul(a, b).numpy()
    assert y.shape == (4, 40, 48) and np.all(y == 0) and not np.any(np.signbit(y))


@needs_kernel
def test_nan_and_inf_propagate(ours, rng):
    an = rng.standard_normal((4, 36, 40)).astype(np.float32)
    bn = rng.standard_normal((4, 40, 50)).astype(np.float32)
    an[1, 3, 7] = np.nan
    bn[2, 5, 9] = np.inf
    y = dg.ops.matmul(dg.tensor(an), dg.tensor(bn)).numpy()
    with np.errstate(invalid="ignore"):
        ref = np.matmul(an.astype(np.float64), bn.astype(np.float64))
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    assert np.array_equal(np.isinf(y), np.isinf(ref))


_HASH_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
dg.plugins.pin("MatMul", "cpu", "MatMulBatchedF32Avx512")
rng = np.random.default_rng(5)
h = hashlib.sha256()
for sa, sb, ta, tb in [((32, 128, 64), (32, 128, 64), False, True),
                       ((7, 65, 131), (7, 65, 79), True, False),
                       ((3, 64, 48), (48, 80), False, False)]:
    a = dg.tensor(rng.standard_normal(sa).astype(np.float32))
    b = dg.tensor(rng.standard_normal(sb).astype(np.float32))
    h.update(dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy().tobytes())
print(h.hexdigest())
"""


@needs_kernel
def test_same_bits_for_any_thread_count():
    hashes = {}
    for t in (1, 2, 3):
        env = dict(os.environ, OMP_NUM_THREADS=str(t), DRAGON_NUM_THREADS=str(t),
                   DRAGON_CPU_EIGEN_BATCHED_GEMM="all")
        out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        hashes[t] = out.stdout.strip()
    assert len(set(hashes.values())) == 1, hashes


@needs_kernel
def test_every_case_on_the_kernel():
    """This file again with DRAGON_CPU_EIGEN_BATCHED_GEMM=all, so the cases
    outside the measured class (1 item, k = 0, small sides) run on the
    kernel too."""
    if ALL:
        pytest.skip("already running with DRAGON_CPU_EIGEN_BATCHED_GEMM=all")
    env = dict(os.environ, DRAGON_CPU_EIGEN_BATCHED_GEMM="all")
    out = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p",
                          "no:cacheprovider", "-x", "-k",
                          "not every_case and not thread_count and not routes"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]


@needs_kernel
def test_small_cases_under_all(ours, rng):
    """Sides below the class (1..7 rows, 1..15 columns, k = 1): computed
    right when the kernel takes them (under =all)."""
    for sa, sb in [((3, 1, 1), (3, 1, 1)), ((2, 7, 3), (2, 3, 13)),
                   ((2, 5, 9), (2, 9, 17)), ((4, 13, 31), (4, 31, 65))]:
        a, an = _f32(rng, sa)
        b, bn = _f32(rng, sb)
        _check(dg.ops.matmul(a, b).numpy(), np.matmul(an, bn), an, bn)
        at = dg.tensor(np.ascontiguousarray(np.swapaxes(an, -1, -2)).astype(np.float32))
        bt = dg.tensor(np.ascontiguousarray(np.swapaxes(bn, -1, -2)).astype(np.float32))
        y = dg.ops.matmul(at, bt, transpose_a=True, transpose_b=True).numpy()
        _check(y, np.matmul(an, bn), an, bn)


# ------------------------------------------------------------ dispatch

def test_explain_names_the_kernel_and_priority():
    if not X86:
        pytest.skip("the batched kernel is built on x86-64 only")
    text = plugins.explain("MatMul", "cpu", "float32")
    assert f"{NAME} [plugin cpu_eigen] priority=20" in text, text
    assert NAME not in plugins.explain("MatMul", "cpu", "bfloat16")
    assert NAME not in plugins.explain("MatMulBiasAct", "cpu", "float32")


_ROUTE_SCRIPT = r"""
import numpy as np, dragon_core as dg
rng = np.random.default_rng(3)
def t(shape):
    return dg.tensor(rng.standard_normal(shape).astype(np.float32))
def heads(shape):  # [B, H, S, D] view of a dense [B, S, H, D]
    b, h, s, d = shape
    return dg.ops.transpose(t((b, s, h, d)), [0, 2, 1, 3])
cases = {
    "qk": lambda: dg.ops.matmul(heads((8, 4, 128, 64)), heads((8, 4, 128, 64)), transpose_b=True),
    "pv": lambda: dg.ops.matmul(t((8, 4, 128, 128)), heads((8, 4, 128, 64))),
    "ptdo": lambda: dg.ops.matmul(t((8, 4, 128, 128)), heads((8, 4, 128, 64)), transpose_a=True),
    "edge_small": lambda: dg.ops.matmul(t((8, 8, 8)), t((8, 8, 8))),
    "edge_large": lambda: dg.ops.matmul(t((4, 256, 256)), t((4, 256, 256))),
    "too_small": lambda: dg.ops.matmul(t((8, 7, 64)), t((8, 64, 64))),
    "too_large": lambda: dg.ops.matmul(t((4, 257, 64)), t((4, 64, 64))),
    "single": lambda: dg.ops.matmul(t((128, 64)), t((64, 128))),
    "one_item": lambda: dg.ops.matmul(t((1, 128, 64)), t((1, 64, 128))),
}
for name, fn in cases.items():
    print("CASE", name, flush=True)
    fn().numpy()
"""


def _onednn_ran(policy):
    """{case: whether oneDNN executed a matmul for it} in a child process."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS="2", DRAGON_NUM_THREADS="2")
    env.pop("DRAGON_CPU_EIGEN_BATCHED_GEMM", None)
    if policy:
        env["DRAGON_CPU_EIGEN_BATCHED_GEMM"] = policy
    out = subprocess.run([sys.executable, "-c", _ROUTE_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ran, case = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("CASE "):
            case = line.split()[1]
            ran[case] = False
        elif line.startswith("onednn_verbose,") and ",exec," in line and ",matmul," in line:
            ran[case] = True
    return ran


@needs_kernel
def test_measured_class_routes_as_documented():
    """Batches (>= 2 items and >= the thread count) of items with every side
    in [8, 256] go to the batched kernel (no oneDNN matmul execution);
    others stay on oneDNN; =all takes every call, =off none."""
    if "MatMulOneDNN" not in KERNELS:
        pytest.skip("mkldnn is not installed")
    auto = _onednn_ran(None)
    assert auto == {"qk": False, "pv": False, "ptdo": False, "edge_small": False,
                    "edge_large": False, "too_small": True, "too_large": True,
                    "single": True, "one_item": True}, auto
    every = _onednn_ran("all")
    assert not any(every.values()), every
    assert all(_onednn_ran("off").values())
