"""Host-side tests of ``src/index_math.h`` (plain C++, compiled here with the
host compiler): FastDiv against ``/`` over divisors and dividends up to
2^31, and the batch-norm ChannelCut: over many [N, C, S] shapes and vector
widths, the blocks' unit ranges tile each channel, and the units of all
channels together cover every element of the tensor exactly once, inside
the channel they belong to.
"""

from __future__ import annotations


from _host_cpp import run_program


PROGRAM = r"""
#include <cstdio>
#include <cstdint>
#include <random>
#include <vector>
#include "index_math.h"

using namespace dragon_cuda;

static int CheckDiv(uint32_t d, uint32_t n) {
  const FastDiv f(d);
  if (f.Div(n) != n / d) {
    std::printf("FastDiv(%u).Div(%u) = %u, want %u\n", d, n, f.Div(n), n / d);
    return 1;
  }
  return 0;
}

static int CheckCut(int64_t n, int64_t c, int64_t s, int64_t vec) {
  const ChannelCut k = MakeChannelCut(n, c, s, vec, 256);
  int fails = 0;
  if (k.vec != ((vec > 1 && s % vec == 0) ? vec : 1) || k.su * k.vec != s || k.units != n * k.su ||
      k.parts < 1 || k.parts > kCutMaxParts || k.per * k.parts < k.units) {
    std::printf("cut of [%lld, %lld, %lld] vec %lld: bad fields\n", (long long)n, (long long)c,
                (long long)s, (long long)vec);
    return 1;
  }
  std::vector<int> seen(static_cast<size_t>(n * c * s), 0);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t j = 0; j < k.parts; ++j) {
      const int64_t lo = j * k.per, hi = lo + k.per < k.units ? lo + k.per : k.units;
      for (int64_t u = lo; u < hi; ++u) {
        const int64_t e = k.Offset(ch, u) * k.vec;
        for (int64_t t = 0; t < k.vec; ++t) {
          const int64_t i = e + t;
          if (i < 0 || i >= n * c * s || (i / s) % c != ch) {
            if (fails++ < 3) std::printf("unit %lld of channel %lld -> %lld\n", (long long)u,
                                         (long long)ch, (long long)i);
            continue;
          }
          ++seen[static_cast<size_t>(i)];
        }
      }
    }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1 && fails++ < 3) std::printf("element %zu seen %d times\n", i, seen[i]);
  return fails;
}

int main() {
  int fails = 0;
  const uint32_t ds[] = {1, 2, 3, 7, 49, 196, 784, 3136, 12544, 65535, 65537, 1u << 30,
                         (1u << 30) + 3, (1u << 31) - 1};
  for (uint32_t d : ds) {
    for (uint32_t n = 0; n < 300000; ++n) fails += CheckDiv(d, n);
    for (uint32_t n = (1u << 31) - 300000; n < (1u << 31); ++n) fails += CheckDiv(d, n);
  }
  std::mt19937_64 rng(11);
  for (int t = 0; t < 3000000 && fails < 10; ++t) {
    const uint32_t d = 1 + static_cast<uint32_t>(rng() % ((t & 1) ? 100000u : (1u << 31) - 1));
    fails += CheckDiv(d, static_cast<uint32_t>(rng() % (1u << 31)));
  }
  const int64_t shapes[][3] = {{1, 1, 1}, {0, 3, 5}, {3, 2, 0}, {8, 3, 1}, {2, 3, 49}, {4, 3, 196},
                               {2, 5, 3136}, {1, 2, 70000}, {16, 6, 1517}, {300, 5, 1},
                               {64, 2, 784}, {3, 7, 8}, {5, 1, 4096}};
  for (const auto& sh : shapes)
    for (int64_t vec : {1, 2, 4, 8}) fails += CheckCut(sh[0], sh[1], sh[2], vec);
  for (int t = 0; t < 200 && fails < 10; ++t) {
    const int64_t n = static_cast<int64_t>(rng() % 9), c = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t s = static_cast<int64_t>(rng() % 5000);
    fails += CheckCut(n, c, s, int64_t{1} << (rng() % 4));
  }
  std::printf(fails ? "FAILED %d\n" : "OK\n", fails);
  return fails ? 1 : 0;
}
"""


def test_fastdiv_and_channel_cut(tmp_path):
    run_program(tmp_path, "index_math", PROGRAM, flags=("-O2",), timeout=300)


MERGE_PROGRAM = r"""
#include <cstdio>
#include <cstdint>
#include <random>
#include <vector>
#include "merge_axes.h"

using namespace dragon_cuda;
using V = std::vector<int64_t>;

// Offsets of element i as fused.cu's Run forms them: divisions on every axis
// but the outermost, whose index is what is left of i.
static V Offsets(int64_t i, const V& shape, const std::vector<V>& st) {
  V off(st.size(), 0);
  int64_t rest = i;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 1; --d) {
    const int64_t q = rest / shape[d], r = rest - q * shape[d];
    for (size_t k = 0; k < st.size(); ++k) off[k] += r * st[k][d];
    rest = q;
  }
  if (!shape.empty())
    for (size_t k = 0; k < st.size(); ++k) off[k] += rest * st[k][0];
  return off;
}

int main() {
  std::mt19937_64 rng(5);
  int fails = 0;
  for (int t = 0; t < 3000 && fails < 5; ++t) {
    const int nd = static_cast<int>(rng() % 6), nops = 1 + static_cast<int>(rng() % 8);
    V shape(nd);
    int64_t n = 1;
    for (auto& s : shape) { s = 1 + static_cast<int64_t>(rng() % 5); n *= s; }
    std::vector<V> st(nops, V(nd));
    for (int k = 0; k < nops; ++k) {
      int64_t stride = 1;  // dense over a shape with some axes broadcast (stride 0)
      for (int d = nd - 1; d >= 0; --d) {
        const bool bcast = (t % 3 == 0) ? false : (rng() % 3 == 0);
        st[k][d] = bcast ? 0 : stride;
        if (!bcast) stride *= shape[d];
      }
    }
    V ms = shape;
    std::vector<V> mst = st;
    MergeAxes(&ms, &mst);
    int64_t mn = 1;
    for (auto s : ms) mn *= s;
    bool dense = ms.size() <= 1;
    for (int k = 0; k < nops; ++k) dense = dense && (ms.empty() || mst[k][0] == 1);
    bool all_dense = true;
    for (int k = 0; k < nops; ++k)
      for (int d = 0; d < nd; ++d) all_dense = all_dense && (shape[d] == 1 || st[k][d] != 0);
    if (mn != n || (all_dense && !dense)) { ++fails; std::printf("case %d: size or density\n", t); }
    for (int64_t i = 0; i < n; ++i) {
      V a = Offsets(i, shape, st), b = dense ? V(nops, i) : Offsets(i, ms, mst);
      if (a != b) { ++fails; std::printf("case %d element %lld differs\n", t, (long long)i); break; }
    }
  }
  std::printf(fails ? "FAILED %d\n" : "OK\n", fails);
  return fails ? 1 : 0;
}
"""


def test_merge_axes(tmp_path):
    """MergeAxes (fused.cu's axis merging): the merged shape and strides give
    every element the offsets the original ones give (divisions on all axes
    but the outermost, as the kernel forms them), and operands dense over
    the output merge to one stride-1 axis (the kernel's dense path)."""
    run_program(tmp_path, "merge", MERGE_PROGRAM, flags=("-O2",), timeout=300)
