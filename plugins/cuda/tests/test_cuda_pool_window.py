"""Host-side test of the max-pool window walk the cuda MaxPool2d kernels share
(``src/pool_window.h``: ``MaxPoolWindowArgMax``, used by the NCHW kernels'
``ArgMaxWindow`` and by the channels-last kernel, pool.cu).

The header is plain C++: it is compiled here with the host compiler and run
over NCHW and NHWC layouts of the same tensors, with the index types the
kernels use (32-bit for NCHW, 64-bit for channels-last), and compared with a
NumPy reference of cpu_eigen's rules written independently: padded cells
never win, a NaN wins over every number (the first NaN in window order),
ties go to the first cell in row-major window order. Cases: ties (values
from a few integers), NaN and +-inf, padding, dilation, strides larger and
smaller than the kernel, one-row and one-column inputs, float32 and float64.
"""

from __future__ import annotations

import numpy as np
import pytest

from _host_cpp import run_program

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include "pool_window.h"

using namespace dragon_cuda;

struct Geometry {
  int64_t h, w, kh, kw, sh, sw, ph, pw, dh, dw;
};

template <typename T, typename I>
static void Run(int nhwc, int64_t n, int64_t c, int64_t oh, int64_t ow, const Geometry& g) {
  const int64_t count = n * c * g.h * g.w;
  std::vector<T> x(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    double v;
    if (std::scanf("%la", &v) != 1) {
      std::printf("bad input\n");
      return;
    }
    x[static_cast<size_t>(k)] = static_cast<T>(v);
  }
  // Element strides of the layout, over the logical NCHW axes.
  const int64_t s0 = c * g.h * g.w;
  const int64_t s1 = nhwc ? 1 : g.h * g.w;
  const int64_t s2 = nhwc ? g.w * c : g.w;
  const int64_t s3 = nhwc ? c : 1;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const T* xp = x.data() + b * s0 + ch * s1;
          I at = 0;
          const bool found = MaxPoolWindowArgMax<T>(xp, g, static_cast<I>(i), static_cast<I>(j),
                                                    static_cast<I>(s2), static_cast<I>(s3), &at);
          if (!found) {
            std::printf("E\n");
            continue;
          }
          const int64_t off = static_cast<int64_t>(at);
          const int64_t r = off / s2, col = (off - r * s2) / s3;
          std::printf("%lld %lld %a\n", static_cast<long long>(r), static_cast<long long>(col),
                      static_cast<double>(xp[at]));
        }
}

int main() {
  int nhwc, dtype;
  long long n, c, oh, ow;
  Geometry g;
  while (std::scanf("%d %d %lld %lld %lld %lld", &nhwc, &dtype, &n, &c, &oh, &ow) == 6) {
    long long v[10];
    for (long long& e : v)
      if (std::scanf("%lld", &e) != 1) return 2;
    g = Geometry{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
    if (dtype == 0) {
      if (nhwc) Run<float, int64_t>(nhwc, n, c, oh, ow, g);
      else Run<float, int32_t>(nhwc, n, c, oh, ow, g);
    } else {
      if (nhwc) Run<double, int64_t>(nhwc, n, c, oh, ow, g);
      else Run<double, int32_t>(nhwc, n, c, oh, ow, g);
    }
    std::printf("END\n");
  }
  std::printf("OK\n");
  return 0;
}
"""


def _out_size(n, k, s, p0, p1, d):
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def _reference(x, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """Per output (n, c, i, j): None for an empty window, else (row, col,
    value) of the winning cell: the first NaN in row-major window order, else
    the first maximum."""
    n, c, h, w = x.shape
    out = []
    for b in range(n):
        for ch in range(c):
            for i in range(oh):
                for j in range(ow):
                    cells = [(r, q) for r in (i * sh - ph + a * dh for a in range(kh))
                             if 0 <= r < h
                             for q in (j * sw - pw + e * dw for e in range(kw)) if 0 <= q < w]
                    if not cells:
                        out.append(None)
                        continue
                    vals = np.array([x[b, ch, r, q] for r, q in cells])
                    nan = np.flatnonzero(np.isnan(vals))
                    k = int(nan[0]) if nan.size else int(np.argmax(vals))
                    out.append((cells[k][0], cells[k][1], float(vals[k])))
    return out


def _cases():
    rng = np.random.default_rng(3)
    cases = []
    geoms = [
        # (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw)
        (2, 3, 5, 6, 2, 2, 2, 2, 0, 0, 1, 1),
        (1, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1),       # padding
        (1, 3, 9, 8, 3, 2, 1, 2, 2, 1, 2, 3),       # dilation, padding
        (2, 2, 6, 5, 3, 3, 1, 1, 1, 1, 2, 2),       # overlapping, dilated
        (1, 1, 1, 7, 1, 3, 1, 2, 0, 1, 1, 1),       # one row
        (1, 2, 8, 1, 4, 1, 3, 1, 2, 0, 1, 1),       # one column
        (1, 2, 4, 4, 2, 2, 3, 3, 1, 1, 1, 1),       # stride beyond the kernel
        (1, 1, 3, 3, 5, 5, 1, 1, 2, 2, 1, 1),       # window larger than x
    ]
    for g in geoms:
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw = g
        oh, ow = _out_size(h, kh, sh, ph, ph, dh), _out_size(w, kw, sw, pw, pw, dw)
        assert oh > 0 and ow > 0, g
        for kind in ("ties", "nan", "random"):
            if kind == "ties":
                x = rng.integers(0, 3, size=(n, c, h, w)).astype(np.float64)
            elif kind == "nan":
                x = rng.integers(-2, 3, size=(n, c, h, w)).astype(np.float64)
                x[rng.random(x.shape) < 0.15] = np.nan
                x[rng.random(x.shape) < 0.1] = np.inf
                x[rng.random(x.shape) < 0.1] = -np.inf
            else:
                x = rng.standard_normal((n, c, h, w))
            cases.append((g, oh, ow, x))
    return cases


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_window_walk_matches_numpy_in_both_layouts(tmp_path, dtype):
    cases = _cases()
    lines, refs = [], []
    for layout in (0, 1):  # NCHW, NHWC
        for g, oh, ow, x in cases:
            n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw = g
            x = x.astype(dtype)
            mem = x if layout == 0 else x.transpose(0, 2, 3, 1)
            lines.append(f"{layout} {0 if dtype == np.float32 else 1} {n} {c} {oh} {ow} "
                         f"{h} {w} {kh} {kw} {sh} {sw} {ph} {pw} {dh} {dw}\n")
            lines.append(" ".join(float(v).hex() for v in mem.ravel()) + "\n")
            refs.append(_reference(x.astype(np.float64), kh, kw, sh, sw, ph, pw, dh, dw,
                                   oh, ow))
    # run_program gives the program no stdin: it reads the input file
    src = PROGRAM.replace("int main() {", "int main() {\n  if (!std::freopen(\"" +
                          str(tmp_path / "input.txt") + "\", \"r\", stdin)) return 3;")
    (tmp_path / "input.txt").write_text("".join(lines))
    out = run_program(tmp_path, f"pool_window_{np.dtype(dtype).name}", src)
    blocks = out.strip().split("END\n")
    assert blocks[-1].strip() == "OK" and len(blocks) == len(refs) + 1
    nan_wins = ties = empty = 0
    for k, (block, ref) in enumerate(zip(blocks, refs)):
        got = block.strip().splitlines()
        assert len(got) == len(ref), k
        for line, want in zip(got, ref):
            if want is None:
                assert line == "E", (k, line)
                empty += 1
                continue
            r, q, v = line.split()
            assert (int(r), int(q)) == want[:2], (k, line, want)
            v = float.fromhex(v) if v not in ("nan", "-nan") else np.nan
            if np.isnan(want[2]):
                assert np.isnan(v), (k, line, want)
                nan_wins += 1
            else:
                assert v == want[2], (k, line, want)
    # ties: the reference's first maximum differs from the last one somewhere
    for g, oh, ow, x in cases:
        xs = x[np.isfinite(x)]
        ties += int(xs.size != np.unique(xs).size)
    assert nan_wins > 0 and ties > 0
    assert empty == 0  # every geometry here has a cell in each window


def test_empty_window_has_no_maximum(tmp_path):
    """A window entirely in the padding (pads >= kernel, which the shape
    rules exclude) reports no maximum in both layouts."""
    x = np.arange(4, dtype=np.float64).reshape(1, 1, 2, 2)
    lines = []
    for layout in (0, 1):
        # 1x1 kernel, stride 1, pad 1: the output border windows are padding
        lines.append(f"{layout} 1 1 1 4 4 2 2 1 1 1 1 1 1 1 1\n")
        lines.append(" ".join(float(v).hex() for v in x.ravel()) + "\n")
    src = PROGRAM.replace("int main() {", "int main() {\n  if (!std::freopen(\"" +
                          str(tmp_path / "input.txt") + "\", \"r\", stdin)) return 3;")
    (tmp_path / "input.txt").write_text("".join(lines))
    out = run_program(tmp_path, "pool_window_empty", src)
    blocks = out.strip().split("END\n")[:2]
    for block in blocks:
        got = block.strip().splitlines()
        assert len(got) == 16
        inner = {(i, j) for i in (1, 2) for j in (1, 2)}
        for k, line in enumerate(got):
            i, j = divmod(k, 4)
            if (i, j) in inner:
                r, q, v = line.split()
                assert (int(r), int(q)) == (i - 1, j - 1)
                assert float.fromhex(v) == x[0, 0, i - 1, j - 1]
            else:
                assert line == "E"


# ------------------------------------------------------ the channels-last kernel

CL_PROGRAM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "pool_window.h"

using namespace dragon_cuda;

struct Pool {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

// The channels-last MaxPool2d kernel's loop (pool.cu: one thread per t) run
// on the host over x in NHWC memory; y channels-last (ylayout 1) or
// row-major (0). Prints y in logical NCHW order, "U" for an element the
// loop never wrote.
int main() {
  int ylayout;
  long long n, c, v[12];
  while (std::scanf("%d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld",
                    &ylayout, &n, &c, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                    &v[8], &v[9], &v[10], &v[11]) == 15) {
    const Pool p{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
    std::vector<double> x(static_cast<size_t>(n * c * p.h * p.w));
    for (double& v : x)
      if (std::scanf("%la", &v) != 1) return 2;
    const Strides4 xs{p.h * p.w * c, 1, p.w * c, c};
    const Strides4 ys = ylayout ? Strides4{p.oh * p.ow * c, 1, p.ow * c, c}
                                : Strides4{c * p.oh * p.ow, p.oh * p.ow, p.ow, 1};
    const int64_t total = n * c * p.oh * p.ow;
    const double unwritten = -12345.0;
    std::vector<double> y(static_cast<size_t>(total), unwritten);
    for (int64_t t = 0; t < total; ++t)
      MaxPoolChannelsLastAt<double>(x.data(), y.data(), p, c, xs, ys, t, std::nan(""));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < p.oh; ++i)
          for (int64_t j = 0; j < p.ow; ++j) {
            const double v = y[static_cast<size_t>(b * ys.s0 + ch * ys.s1 + i * ys.s2 +
                                                   j * ys.s3)];
            if (v == unwritten) std::printf("U\n");
            else std::printf("%a\n", v);
          }
    std::printf("END\n");
  }
  std::printf("OK\n");
  return 0;
}
"""


def test_channels_last_kernel_loop_matches_numpy(tmp_path):
    """The channels-last MaxPool2d kernel's element (pool_window.h:
    MaxPoolChannelsLastAt: the split of t into (n, ch, oi, oj) in NHWC
    order, the window walk over x's strides, the store through y's strides)
    run for every t over x in NHWC memory, into a channels-last and into a
    row-major y: every output written once, each the NumPy max-pool value."""
    lines, refs = [], []
    for g, oh, ow, x in _cases():
        n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw = g
        want = np.array([np.nan if r is None else r[2] for r in
                         _reference(x, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)])
        mem = x.transpose(0, 2, 3, 1)
        for ylayout in (1, 0):
            lines.append(f"{ylayout} {n} {c} {h} {w} {oh} {ow} {kh} {kw} {sh} {sw} {ph} {pw} "
                         f"{dh} {dw}\n")
            lines.append(" ".join(float(v).hex() for v in mem.ravel()) + "\n")
            refs.append(want)
    src = CL_PROGRAM.replace("int main() {", "int main() {\n  if (!std::freopen(\"" +
                             str(tmp_path / "input.txt") + "\", \"r\", stdin)) return 3;")
    (tmp_path / "input.txt").write_text("".join(lines))
    out = run_program(tmp_path, "pool_channels_last_loop", src)
    blocks = out.strip().split("END\n")
    assert blocks[-1].strip() == "OK" and len(blocks) == len(refs) + 1
    for k, (block, want) in enumerate(zip(blocks, refs)):
        got = block.strip().splitlines()
        assert "U" not in got, f"case {k}: an output element was never written"
        got = np.array([float.fromhex(v) if v not in ("nan", "-nan") else np.nan for v in got])
        np.testing.assert_array_equal(got, want, err_msg=f"case {k}")
