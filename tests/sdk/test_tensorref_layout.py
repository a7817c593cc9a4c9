"""The SDK's ``dg::TensorRef::is_contiguous()`` / ``is_channels_last()``
(sdk/include/dragon/plugin.hpp) agree exactly with the core's
``TensorImpl::is_contiguous()`` / ``is_channels_last()`` (the layout rules
the dispatcher uses to decide what a kernel receives), and both with
PyTorch's.

A small C++ program, built with the host compiler against the header alone
(``-Werror``), reads one tensor layout a line and prints the SDK's two
answers; the same layouts are made as core tensors (zero-copy NumPy views
with those strides) and asked the same questions. The sweep covers 0-d
tensors, empty tensors with any strides, size-1 axes with odd strides
(zero, negative, huge), row-major, channels-last 4-D and 5-D, transposed
and sliced views, and random strides.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest

import dragon_core as dg

SDK_INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk",
                           "include")

PROGRAM = r"""
#include <cstdio>
#include <vector>
#include "dragon/plugin.hpp"

// Each line: ndim, then ndim sizes, then ndim strides. Prints "c l" (the
// answers of is_contiguous and is_channels_last, 0 or 1) per line.
int main() {
  int nd;
  while (std::scanf("%d", &nd) == 1) {
    std::vector<int64_t> shape(nd > 0 ? nd : 1), strides(nd > 0 ? nd : 1);
    for (int i = 0; i < nd; ++i) {
      long long v;
      if (std::scanf("%lld", &v) != 1) return 2;
      shape[i] = v;
    }
    for (int i = 0; i < nd; ++i) {
      long long v;
      if (std::scanf("%lld", &v) != 1) return 2;
      strides[i] = v;
    }
    DgTensorView view{};
    view.struct_size = sizeof(DgTensorView);
    view.dtype = DG_FLOAT32;
    view.ndim = nd;
    view.shape = shape.data();
    view.strides = strides.data();
    const dg::TensorRef t(&view);
    std::printf("%d %d\n", t.is_contiguous() ? 1 : 0, t.is_channels_last() ? 1 : 0);
  }
  return 0;
}
"""


def _row_major(shape):
    s, out = 1, []
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def _channels_last(shape):
    """NHWC (NDHWC) strides over an NCHW (NCDHW) shape (the core's
    ChannelsLastStrides: empty axes step as size 1)."""
    r = len(shape)
    strides = [0] * r
    step = 1
    strides[1] = step
    step *= max(shape[1], 1)
    for d in range(r - 1, 1, -1):
        strides[d] = step
        step *= max(shape[d], 1)
    strides[0] = step
    return tuple(strides)


def _layouts():
    """(shape, element strides) pairs covering every case of both rules."""
    rng = np.random.default_rng(15)
    cases = [((), ())]
    sizes = (0, 1, 2, 3)
    for nd in (1, 2, 3, 4, 5):
        for shape in itertools.product(sizes, repeat=nd):
            if nd >= 4 and rng.random() > 0.25:   # a quarter of the 4-D and 5-D shapes
                continue
            cases.append((shape, _row_major(shape)))
            if nd in (4, 5):
                cases.append((shape, _channels_last(shape)))
            # transposed (reversed axes) and swapped last two axes
            rm = _row_major(shape)
            cases.append((shape[::-1], rm[::-1]))
            if nd >= 2:
                perm = list(range(nd - 2)) + [nd - 1, nd - 2]
                cases.append((tuple(shape[p] for p in perm), tuple(rm[p] for p in perm)))
            # odd strides on size-1 and empty axes, elsewhere the dense ones
            for base in (_row_major(shape),) + ((_channels_last(shape),) if nd in (4, 5) else ()):
                odd = list(base)
                for i, n in enumerate(shape):
                    if n in (0, 1):
                        odd[i] = int(rng.choice([0, 7, -3, 1 << 40, base[i] + 1]))
                cases.append((shape, tuple(odd)))
            # random strides (mostly not dense), and one axis off by one
            cases.append((shape, tuple(int(v) for v in rng.integers(-4, 9, size=nd))))
            off = list(rm)
            k = int(rng.integers(nd))
            off[k] += 1
            cases.append((shape, tuple(off)))
    # sliced views: every other row / channel
    cases.append(((2, 3), (6, 1)))
    cases.append(((2, 3, 4, 5), (120, 1, 30, 6)))    # channels-last with a padded N stride
    cases.append(((2, 3, 4, 5), (60, 1, 15, 3)))     # channels-last exactly
    cases.append(((2, 3, 4, 5), (60, 1, 16, 3)))     # channels-last with a padded row
    return cases


def _core_tensor(shape, strides):
    """A core tensor viewing a NumPy buffer with these element strides
    (negative ones start inside the buffer)."""
    item = 4
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if n > 0 and s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if n > 0 and s > 0)
    if any(n == 0 for n in shape):
        lo = hi = 0
    buf = np.zeros(hi - lo + 1, np.float32)
    arr = np.ndarray(shape, np.float32, buffer=buf, offset=-lo * item,
                     strides=tuple(s * item for s in strides))
    t = dg.from_numpy(arr)
    assert tuple(t.shape) == tuple(shape)
    return t


@pytest.fixture(scope="module")
def sdk_answers(tmp_path_factory):
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no host C++ compiler (set CXX) to build the SDK program")
    d = tmp_path_factory.mktemp("tensorref")
    src, exe = d / "layout.cc", d / "layout"
    src.write_text(PROGRAM)
    build = subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
                            f"-I{SDK_INCLUDE}", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr

    def ask(layouts):
        text = "".join(f"{len(sh)} {' '.join(map(str, sh))} {' '.join(map(str, st))}\n"
                       for sh, st in layouts)
        run = subprocess.run([str(exe)], input=text, capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, run.stderr
        rows = [tuple(bool(int(v)) for v in line.split()) for line in run.stdout.splitlines()]
        assert len(rows) == len(layouts)
        return rows
    return ask


def test_sdk_and_core_agree_on_every_layout(sdk_answers):
    layouts = []
    core = []
    for shape, strides in _layouts():
        t = _core_tensor(shape, strides)
        # the core's own view of the layout is what the SDK is asked about
        layouts.append((tuple(t.shape), tuple(t.strides)))
        core.append((t.is_contiguous(), t._is_channels_last()))
    sdk = sdk_answers(layouts)
    bad = [(lay, c, s) for lay, c, s in zip(layouts, core, sdk) if c != s]
    assert not bad, f"{len(bad)} of {len(layouts)} layouts differ (layout, core, sdk): " \
                    f"{bad[:10]}"
    # the sweep reaches every case of both rules
    empty_odd = [c for (sh, st), c in zip(layouts, core)
                 if 0 in sh and st != _row_major(sh)]
    assert empty_odd and all(c[0] for c in empty_odd)
    assert any(c == (True, True) for c in core)       # both (C == 1 or H == W == 1)
    assert any(c == (False, True) for c in core)      # strictly channels-last
    assert any(c == (False, False) for c in core)
    assert any(c == (True, False) for (sh, _), c in zip(layouts, core) if len(sh) == 4)
    assert any(len(sh) == 0 for sh, _ in layouts) and sdk[0] == (True, False)


@pytest.mark.parametrize("shape,strides,contiguous", [
    ((), (), True),                       # 0-d
    ((0,), (5,), True),                   # empty, odd stride
    ((2, 0, 3), (-1, 0, 100), True),      # empty, any strides
    ((3, 1, 2), (2, 99, 1), True),        # size-1 axis: its stride never matters
    ((1, 1), (-7, 0), True),
    ((3, 2), (1, 3), False),              # transposed
    ((2, 3), (6, 1), False),              # every other row
])
def test_contiguity_rule_cases(sdk_answers, shape, strides, contiguous):
    t = _core_tensor(shape, strides)
    assert t.is_contiguous() is contiguous
    assert sdk_answers([(shape, strides)])[0][0] is contiguous


def test_core_and_sdk_agree_with_torch(sdk_answers):
    torch = pytest.importorskip("torch")
    layouts = [(sh, st) for sh, st in _layouts() if all(s >= 0 for s in st)]
    sdk = sdk_answers(layouts)
    for (shape, strides), (c, cl) in zip(layouts, sdk):
        t = torch.empty_strided(shape, strides)
        assert t.is_contiguous() == c, (shape, strides)
        if len(shape) == 4:
            want = t.is_contiguous(memory_format=torch.channels_last)
        elif len(shape) == 5:
            want = t.is_contiguous(memory_format=torch.channels_last_3d)
        else:
            want = False
        assert want == cl, (shape, strides)
