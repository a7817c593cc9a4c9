// The dense products of the DeformConv2d CPU kernels (this plugin carries
// no BLAS): a register-blocked GEMM and a tiled transpose, declared in
// gemm.h and instantiated for float and double.
#include "gemm.h"

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace vision {
namespace {

// One Gemm call (see gemm.h).
template <typename T>
struct GemmArgs {
  bool trans_a;
  int64_t m, n, k;
  const T* a;
  const T* b;
  T* c;
  T AAt(int64_t i, int64_t t) const {
    return trans_a ? a[t * m + i] : a[i * k + t];
  }
};

// GemmBlock is cloned for AVX-512 and AVX2 + FMA and chosen at load time by
// the CPU (the library's baseline is plain x86-64) where the compiler can:
// GCC on x86-64. Elsewhere (clang, which does not multiversion templates;
// other architectures) it is one function for the baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VISION_GEMM_CLONES \
  __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define VISION_GEMM_CLONES
#endif

// Rows i0 .. i0 + R - 1 of C += op(A) B: two rows of B at a time, columns
// blocked so the R slices of C stay in L1 across the K loop.
template <int R, typename T>
VISION_GEMM_CLONES void
GemmBlock(const GemmArgs<T>& g, int64_t i0) {
  constexpr int64_t kColumns = 512;
  T* c[R];
  for (int r = 0; r < R; ++r) c[r] = g.c + (i0 + r) * g.n;
  for (int64_t j0 = 0; j0 < g.n; j0 += kColumns) {
    const int64_t j1 = std::min(g.n, j0 + kColumns);
    for (int64_t t = 0; t < g.k; t += 2) {
      const bool pair = t + 1 < g.k;
      T a0[R], a1[R];
      for (int r = 0; r < R; ++r) {
        a0[r] = g.AAt(i0 + r, t);
        a1[r] = pair ? g.AAt(i0 + r, t + 1) : T(0);
      }
      const T* b0 = g.b + t * g.n;
      const T* b1 = pair ? b0 + g.n : b0;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) {
        const T x0 = b0[j], x1 = b1[j];
        for (int r = 0; r < R; ++r) c[r][j] += a0[r] * x0 + a1[r] * x1;
      }
    }
  }
}

}  // namespace

// dst [cols, rows] = src [rows, cols]^T, in tiles.
template <typename T>
void Transpose(int64_t rows, int64_t cols, const T* src, T* dst) {
  constexpr int64_t kTile = 32;
  ParallelFor((rows + kTile - 1) / kTile, kTile * cols, [&](int64_t bi) {
    const int64_t r1 = std::min(rows, (bi + 1) * kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = bi * kTile; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  });
}

// Blocks of 4 rows of C are split across threads.
template <typename T>
void Gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const T* a,
          const T* b, bool accumulate, T* c) {
  constexpr int64_t kRows = 4;
  const GemmArgs<T> g{trans_a, m, n, k, a, b, c};
  ParallelFor((m + kRows - 1) / kRows, kRows * n * k + 1, [&](int64_t blk) {
    const int64_t i0 = blk * kRows, rows = std::min(kRows, m - i0);
    if (!accumulate) std::fill(c + i0 * n, c + (i0 + rows) * n, T(0));
    switch (rows) {
      case 4: GemmBlock<4>(g, i0); break;
      case 3: GemmBlock<3>(g, i0); break;
      case 2: GemmBlock<2>(g, i0); break;
      default: GemmBlock<1>(g, i0); break;
    }
  });
}

template void Transpose<float>(int64_t, int64_t, const float*, float*);
template void Transpose<double>(int64_t, int64_t, const double*, double*);
template void Gemm<float>(bool, int64_t, int64_t, int64_t, const float*,
                          const float*, bool, float*);
template void Gemm<double>(bool, int64_t, int64_t, int64_t, const double*,
                           const double*, bool, double*);

}  // namespace vision
