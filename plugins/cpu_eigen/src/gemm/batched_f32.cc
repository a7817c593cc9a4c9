// float32 batched small-GEMM on AVX-512: many small products (attention's
// q k^T, p v and their gradients), one thread per batch item.
//
// Compiled once, on x86-64 only, with -march=x86-64-v4 (CMakeLists.txt);
// called only after matmul.cc checked DetectIsaLevel() >= 4. Like gemm.cc
// it shares no inline function or template instance with other
// translation units: its code sits in cpu_eigen::gemm_batched_f32, helpers
// in an anonymous namespace, and it uses only intrinsics and OpenMP.
//
// Method: the threads take whole items, one at a time (no barrier inside
// a product, one fork per call). Per item, on its thread:
//   * op(B) is read in place when its rows are contiguous (b_cs == 1) and m
//     is a multiple of 16; otherwise it is copied once into a dense k x M
//     scratch (M = m rounded up to 16, zero columns past m; a transposed B
//     goes through 16 x 16 register transposes);
//   * op(A) is never copied: the microkernel broadcasts A's elements from
//     wherever they lie (any strides);
//   * the microkernel keeps an MR x (16 NV) tile of C (at most 6 x 64: 24
//     zmm accumulators) over the whole of k, then stores it (masked in the
//     last 16 columns). Items are small (matmul.cc takes only those whose
//     operands fit in L2), so k is not blocked.
// Numerics: each output is one FMA chain over k in order from +0, the same
// for any thread count and any tile position.
// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` idiom of _mm512_undefined_*) when the unpack and shuffle
// intrinsics inline: a false positive in compiler headers (as in gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "batched_f32.h"

#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>

namespace cpu_eigen {
namespace gemm_batched_f32 {
namespace {

constexpr int64_t kMr = 6;   // rows of the largest register tile
constexpr int64_t kNr = 64;  // columns of the largest register tile

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }

bool BInPlace(const BatchedF32Call& g) {
  return g.b_cs == 1 && g.m % 16 == 0;
}

// op(B) (k x m, element (p, j) at b[p * rs + j * cs]) as a dense k x ld
// row-major copy, columns [m, ld) zero.
void PackB(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t m,
           int64_t ld, float* out) {
  if (cs == 1) {
    const __mmask16 tail =
        m % 16 ? static_cast<__mmask16>((1u << (m % 16)) - 1) : 0xFFFF;
    for (int64_t p = 0; p < k; ++p) {
      const float* row = b + p * rs;
      float* o = out + p * ld;
      int64_t j = 0;
      for (; j + 16 <= m; j += 16) _mm512_storeu_ps(o + j, _mm512_loadu_ps(row + j));
      if (j < ld) _mm512_storeu_ps(o + j, _mm512_maskz_loadu_ps(tail, row + j));
    }
    return;
  }
  int64_t p0 = 0, jfull = 0;
  if (rs == 1) {
    // Column j of op(B) is contiguous in k: transpose 16 x 16 blocks.
    jfull = m / 16 * 16;
    for (; p0 + 16 <= k; p0 += 16) {
      for (int64_t j0 = 0; j0 < jfull; j0 += 16) {
        __m512i r[16], t[16];
        for (int64_t j = 0; j < 16; ++j) {
          r[j] = _mm512_castps_si512(_mm512_loadu_ps(b + (j0 + j) * cs + p0));
        }
        for (int j = 0; j < 16; j += 2) {
          t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
          t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
        }
        for (int j = 0; j < 16; j += 4) {
          r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
          r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
          r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
          r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
        }
        for (int h = 0; h < 16; h += 8) {
          for (int j = 0; j < 4; ++j) {
            t[h + j] = _mm512_shuffle_i32x4(r[h + j], r[h + j + 4], 0x88);
            t[h + j + 4] = _mm512_shuffle_i32x4(r[h + j], r[h + j + 4], 0xdd);
          }
        }
        for (int j = 0; j < 8; ++j) {
          r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
          r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
        }
        for (int i = 0; i < 16; ++i) {
          _mm512_storeu_si512(out + (p0 + i) * ld + j0, r[i]);
        }
      }
    }
  }
  // What the blocks left: rows [p0, k) of every column, and rows [0, p0)
  // of the columns past the full 16-column groups; then the zero padding.
  for (int64_t p = 0; p < k; ++p) {
    float* o = out + p * ld;
    const int64_t j_start = p < p0 ? jfull : 0;
    for (int64_t j = j_start; j < m; ++j) o[j] = b[p * rs + j * cs];
    for (int64_t j = m; j < ld; ++j) o[j] = 0.0f;
  }
}

// One MR x (16 NV) tile of C: rows of op(A) from a (element (r, p) at
// a[r * a_rs + p * a_cs]), the matching columns of op(B) at b (row p at
// b + p * ldb, 16 NV readable floats), k terms; the last 16-column group
// stores only the columns in `last`.
template <int MR, int NV>
void Tile(int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
          const float* b, int64_t ldb, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const float* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + r * a_rs;
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(*ar[r]);
      ar[r] += a_cs;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
    b += ldb;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(row + v * 16, acc[r][v]);
    _mm512_mask_storeu_ps(row + (NV - 1) * 16, last, acc[r][NV - 1]);
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*,
                        int64_t, float*, int64_t, __mmask16);

template <int MR>
TileFn TileFor(int nv) {
  switch (nv) {
    case 1: return &Tile<MR, 1>;
    case 2: return &Tile<MR, 2>;
    case 3: return &Tile<MR, 3>;
    default: return &Tile<MR, 4>;
  }
}

TileFn TileFor(int64_t mr, int nv) {
  switch (mr) {
    case 1: return TileFor<1>(nv);
    case 2: return TileFor<2>(nv);
    case 3: return TileFor<3>(nv);
    case 4: return TileFor<4>(nv);
    case 5: return TileFor<5>(nv);
    default: return TileFor<6>(nv);
  }
}

// One product on the calling thread; `pack` is k x Round16(m) floats of
// scratch when B is not read in place.
void Product(const BatchedF32Call& g, const float* a, const float* b, float* c,
             float* pack) {
  if (g.k == 0) {
    for (int64_t i = 0; i < g.n; ++i) std::memset(c + i * g.ldc, 0, g.m * 4);
    return;
  }
  int64_t ldb = g.b_rs;
  if (!BInPlace(g)) {
    ldb = Round16(g.m);
    PackB(b, g.b_rs, g.b_cs, g.k, g.m, ldb, pack);
    b = pack;
  }
  for (int64_t j0 = 0; j0 < g.m; j0 += kNr) {
    const int64_t cols = g.m - j0 < kNr ? g.m - j0 : kNr;
    const int nv = static_cast<int>((cols + 15) / 16);
    const int64_t rem = cols - (nv - 1) * 16;
    const __mmask16 last =
        rem >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << rem) - 1);
    const TileFn full = TileFor(kMr, nv);
    int64_t i0 = 0;
    for (; i0 + kMr <= g.n; i0 += kMr) {
      full(g.k, a + i0 * g.a_rs, g.a_rs, g.a_cs, b + j0, ldb,
           c + i0 * g.ldc + j0, g.ldc, last);
    }
    if (i0 < g.n) {
      TileFor(g.n - i0, nv)(g.k, a + i0 * g.a_rs, g.a_rs, g.a_cs, b + j0, ldb,
                            c + i0 * g.ldc + j0, g.ldc, last);
    }
  }
}

int64_t PackFloats(const BatchedF32Call& g) {
  return BInPlace(g) ? 0 : (g.k * Round16(g.m) + 15) / 16 * 16;
}

int Team(const BatchedF32Call& g) {
  const int threads = g.threads > 1 ? g.threads : 1;
  return static_cast<int>(g.batch < threads ? g.batch : threads);
}

}  // namespace

int64_t WorkspaceBytes(const BatchedF32Call& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return 0;
  return Team(g) * PackFloats(g) * 4;
}

void Gemm(const BatchedF32Call& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return;
  const int team = Team(g);
  const int64_t per = PackFloats(g);
  float* ws = static_cast<float*>(g.workspace);
  const auto item = [&g](int64_t i, float* pack) {
    Product(g, g.a + (g.a_offsets ? g.a_offsets[i] : 0),
            g.b + (g.b_offsets ? g.b_offsets[i] : 0), g.c + i * g.c_stride,
            pack);
  };
  if (team <= 1) {
    for (int64_t i = 0; i < g.batch; ++i) item(i, ws);
    return;
  }
  // Items are handed out one at a time, so a thread the OS deschedules
  // (a shared machine) holds up one item, not a fixed half of the batch;
  // which thread computes an item does not change its bits.
#pragma omp parallel num_threads(team)
  {
    float* pack = ws ? ws + omp_get_thread_num() * per : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < g.batch; ++i) item(i, pack);
  }
}

}  // namespace gemm_batched_f32
}  // namespace cpu_eigen
