// bfloat16 GEMM on AVX512-BF16 (vdpbf16ps), float32 accumulation.
//
// Compiled once, on x86-64 only, with -march=x86-64-v4 and (pragma below)
// AVX512_BF16 (see CMakeLists.txt); called only after matmul_bf16.cc
// checked the CPU (CPUID leaf 7 subleaf 1 EAX bit 5) and the OS (zmm state
// enabled in XCR0). Like
// gemm.cc, it shares no inline function or template instance with other
// translation units: its own code sits in cpu_eigen::gemm_bf16, helpers in
// an anonymous namespace, and it uses only compiler intrinsics and OpenMP.
//
// Method (BLIS-like):
//   * both operands are packed once per product into k-pair-interleaved
//     panels, the layout vdpbf16ps reads (except an A with contiguous k, an
//     even k and at most 8 B panels, whose pairs already are 32-bit words:
//     the microkernel broadcasts them from A's rows in place; and an A
//     stored transposed with n >= 32, packed as kp rows of n pair words,
//     two contiguous stored rows interleaved per 32 words, which the
//     microkernel reads with a pair step of n words): a panel of A holds kMr rows, a
//     32-bit word per (k pair, row) with element 2p in the low half and
//     2p + 1 in the high half; a panel of B holds kNr columns likewise. An
//     odd k gets a zero second half in its last pair, and rows / columns
//     past the matrix are zero, so the microkernel never needs a mask;
//   * the microkernel keeps a kMr x kNr (6 x 64) tile of C in 24 zmm
//     float32 accumulators: per k pair, 4 loads of B, 6 broadcasts of A and
//     24 vdpbf16ps;
//   * loops: blocks of kNcPanels B panels x kMcPanels A panels of C, and
//     for each block the k pairs in chunks of kKcPairs (the block's panels
//     stay in L2 while its tiles are computed). Between chunks a tile's partial sums sit in a float32
//     scratch tile and are loaded back into the accumulators, which is
//     exactly the same arithmetic as one uninterrupted sum;
//   * threads split C by whole panels (rows or columns), never k, so every
//     output is the same sequence of operations for any thread count, and
//     the result is bit-identical across thread counts and blockings.
// Numerics (as oneDNN's AVX512-BF16 kernel): vdpbf16ps adds the two
// products of a pair to the accumulator with round-to-nearest-even,
// treats bfloat16 denormal inputs as zero and flushes denormal results to
// zero; the float32 result is rounded once to bfloat16 (vcvtneps2bf16:
// nearest even, NaN stays a quiet NaN) when C is bfloat16.
// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` idiom of _mm512_undefined_epi32) when the unpack and
// shuffle intrinsics inline: a false positive in compiler headers (as in
// gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// AVX512_BF16 on top of the build's -march=x86-64-v4 (CMakeLists.txt puts
// no CPU flag beyond its per-ISA -march: tests/core/test_build_flags.py),
// and PREFETCHW (prfchw) for the microkernel's prefetch of the C tile it is
// about to write: every CPU with AVX512_BF16 has it (and older ones run
// the instruction as a no-op).
#if defined(__GNUC__) && !defined(__AVX512BF16__)
#pragma GCC target("avx512bf16,prfchw")
#elif defined(__GNUC__) && !defined(__PRFCHW__)
#pragma GCC target("prfchw")
#endif

#include "bf16_gemm.h"
#include "../thread_scratch.h"

#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>

namespace cpu_eigen {
namespace gemm_bf16 {
namespace {

constexpr int64_t kMr = 6;         // rows of the register tile
constexpr int64_t kNr = 64;        // columns of the register tile (4 zmm)
// Blocking, measured on Zen 4 (1 MiB L2 per core): chunks of up to 1024 k
// pairs (so the partial sums of a tile go through memory only for k >
// 2048: reloading them cost more than streaming a longer B panel from
// L2), blocks of 16 A panels (96 rows) by 4 B panels (256 columns).
constexpr int64_t kKcPairs = 1024;  // k pairs per chunk
constexpr int64_t kMcPanels = 16;   // A panels per block
constexpr int64_t kNcPanels = 4;    // B panels per block
constexpr int64_t kTile = kMr * kNr;

// Per-product work below which a batch runs one item per thread, and
// per-thread work below which a product does not take another thread
// (the same rules as the float32 GEMM, gemm.cc).
constexpr double kBatchParallelFlops = 64.0 * 1024 * 1024;
constexpr double kFlopsPerThread = 4.0 * 1024 * 1024;
constexpr double kSerialFlops = 128.0 * 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t Align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

uint32_t Load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// ----------------------------------------------------------------- packing

// Rows [i0, i0 + rows) of op(A) (rows <= kMr) as one A panel of kp pairs:
// out[p * kMr + r] = A[i0 + r][2p] | A[i0 + r][2p + 1] << 16.
void PackA(const uint16_t* a, int64_t rs, int64_t cs, int64_t i0,
           int64_t rows, int64_t k, uint32_t* out) {
  const int64_t kp = CeilDiv(k, 2), full = k / 2;
  if (rs == 1) {
    // op(A) is a transposed row-major matrix: the panel's rows are
    // contiguous for each k. Interleave the rows of k = 2p and 2p + 1.
    const __mmask8 m = static_cast<__mmask8>((1u << rows) - 1);
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = a + i0 + 2 * p * cs;
      const __m128i x = _mm_maskz_loadu_epi16(m, r0);
      const __m128i y = 2 * p + 1 < k ? _mm_maskz_loadu_epi16(m, r0 + cs)
                                      : _mm_setzero_si128();
      uint32_t* o = out + p * kMr;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(x, y));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + 4),
                       _mm_unpackhi_epi16(x, y));
    }
    return;
  }
  int64_t p0 = 0;  // pairs [0, p0) done by the vector loop
  if (cs == 1 && rows == kMr) {
    // Six rows of 16 pairs each: interleave rows two by two (32-bit
    // units), then gather the three 64-bit row pairs of each k pair.
    const __m512i lo32 = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                                          18, 2, 17, 1, 16, 0);
    const __m512i hi32 = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27,
                                          11, 26, 10, 25, 9, 24, 8);
    // Output qword q of pair-group g: from u01 (q % 3 == 0), u23 (1), u45
    // (2), unit q / 3. Sources 0-7 = first operand, 8-15 = second.
    const __m512i x0 = _mm512_set_epi64(10, 2, 0, 9, 1, 0, 8, 0);
    const __m512i x1 = _mm512_set_epi64(5, 0, 12, 4, 0, 11, 3, 0);
    const __m512i x2 = _mm512_set_epi64(0, 15, 7, 0, 14, 6, 0, 13);
    const __m512i j0 = _mm512_set_epi64(0, 0, 1, 0, 0, 0, 0, 0);
    const __m512i j1 = _mm512_set_epi64(0, 4, 0, 0, 3, 0, 0, 2);
    const __m512i j2 = _mm512_set_epi64(7, 0, 0, 6, 0, 0, 5, 0);
    const __mmask8 m0 = 0x24, m1 = 0x49, m2 = 0x92;  // u45's qwords
    for (; p0 + 16 <= full; p0 += 16) {
      __m512i r[kMr];
      for (int64_t i = 0; i < kMr; ++i) {
        r[i] = _mm512_loadu_si512(a + (i0 + i) * rs + 2 * p0);
      }
      for (int h = 0; h < 2; ++h) {
        const __m512i idx = h == 0 ? lo32 : hi32;
        const __m512i u01 = _mm512_permutex2var_epi32(r[0], idx, r[1]);
        const __m512i u23 = _mm512_permutex2var_epi32(r[2], idx, r[3]);
        const __m512i u45 = _mm512_permutex2var_epi32(r[4], idx, r[5]);
        uint32_t* o = out + (p0 + 8 * h) * kMr;
        _mm512_storeu_si512(o, _mm512_mask_permutexvar_epi64(
                                   _mm512_permutex2var_epi64(u01, x0, u23), m0,
                                   j0, u45));
        _mm512_storeu_si512(o + 16, _mm512_mask_permutexvar_epi64(
                                        _mm512_permutex2var_epi64(u01, x1, u23),
                                        m1, j1, u45));
        _mm512_storeu_si512(o + 32, _mm512_mask_permutexvar_epi64(
                                        _mm512_permutex2var_epi64(u01, x2, u23),
                                        m2, j2, u45));
      }
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    uint32_t* o = out + r;
    if (r >= rows) {
      for (int64_t p = 0; p < kp; ++p) o[p * kMr] = 0;
      continue;
    }
    const uint16_t* row = a + (i0 + r) * rs;
    if (cs == 1) {
      for (int64_t p = p0; p < full; ++p) o[p * kMr] = Load32(row + 2 * p);
    } else {
      for (int64_t p = 0; p < full; ++p) {
        o[p * kMr] = row[2 * p * cs] |
                     static_cast<uint32_t>(row[(2 * p + 1) * cs]) << 16;
      }
    }
    if (kp > full) o[full * kMr] = row[(k - 1) * cs];
  }
}

// Columns [j0, j0 + cols) of op(B) (cols <= kNr) as one B panel of kp
// pairs: out[p * kNr + j] = B[2p][j0 + j] | B[2p + 1][j0 + j] << 16.
//
// Only pairs [p_lo, p_hi) are written (the whole panel by default):
// ParallelProduct splits a row-major B by rows, and a split-k product packs
// each half of k on its own thread.
void PackB(const uint16_t* b, int64_t rs, int64_t cs, int64_t j0,
           int64_t cols, int64_t k, uint32_t* out, int64_t p_lo = 0,
           int64_t p_hi = -1, int64_t out_p0 = 0) {
  const int64_t kp = CeilDiv(k, 2), full = k / 2;
  if (p_hi < 0) p_hi = kp;
  if (cs == 1) {
    // Rows 2p and 2p + 1 are contiguous: interleave them 16 bits at a
    // time (vpermt2w), 32 columns per permute.
    const __m512i lo_idx = _mm512_set_epi16(
        47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
        38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_set_epi16(
        63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55,
        23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    const __mmask32 m0 = cols >= 32 ? ~__mmask32{0}
                                    : (__mmask32{1} << cols) - 1;
    const __mmask32 m1 = cols >= 64   ? ~__mmask32{0}
                         : cols <= 32 ? __mmask32{0}
                                      : (__mmask32{1} << (cols - 32)) - 1;
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t p = p_lo; p < p_hi; ++p) {
      const uint16_t* r0 = b + 2 * p * rs + j0;
      const bool has_hi = 2 * p + 1 < k;
      const __m512i x0 = _mm512_maskz_loadu_epi16(m0, r0);
      const __m512i x1 = _mm512_maskz_loadu_epi16(m1, r0 + 32);
      const __m512i y0 = has_hi ? _mm512_maskz_loadu_epi16(m0, r0 + rs) : zero;
      const __m512i y1 =
          has_hi ? _mm512_maskz_loadu_epi16(m1, r0 + rs + 32) : zero;
      uint32_t* o = out + (p - out_p0) * kNr;
      _mm512_storeu_si512(o, _mm512_permutex2var_epi16(x0, lo_idx, y0));
      _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi16(x0, hi_idx, y0));
      _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(x1, lo_idx, y1));
      _mm512_storeu_si512(o + 48, _mm512_permutex2var_epi16(x1, hi_idx, y1));
    }
    return;
  }
  const int64_t pend = p_hi < full ? p_hi : full;  // whole pairs in range
  int64_t p0 = p_lo;  // pairs [p_lo, p0) of full 16-column groups done below
  if (rs == 1) {
    // op(B) is a transposed row-major matrix: each column's pairs are
    // contiguous 32-bit words. Transpose 16 x 16 blocks of them.
    const int64_t groups = cols / 16;
    for (; p0 + 16 <= pend; p0 += 16) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        __m512i r[16], t[16];
        for (int64_t j = 0; j < 16; ++j) {
          r[j] = _mm512_loadu_si512(b + (j0 + gi * 16 + j) * cs + 2 * p0);
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
          _mm512_storeu_si512(out + (p0 + i - out_p0) * kNr + gi * 16, r[i]);
        }
      }
    }
    // Columns past the full groups take the loop below from pair p_lo.
  }
  for (int64_t j = 0; j < kNr; ++j) {
    uint32_t* o = out + j;
    const int64_t pstart = (rs == 1 && j < cols / 16 * 16) ? p0 : p_lo;
    if (j >= cols) {
      for (int64_t p = p_lo; p < p_hi; ++p) o[(p - out_p0) * kNr] = 0;
      continue;
    }
    const uint16_t* col = b + (j0 + j) * cs;
    if (rs == 1) {
      for (int64_t p = pstart; p < pend; ++p) o[(p - out_p0) * kNr] = Load32(col + 2 * p);
    } else {
      for (int64_t p = p_lo; p < pend; ++p) {
        o[(p - out_p0) * kNr] = col[2 * p * rs] |
                     static_cast<uint32_t>(col[(2 * p + 1) * rs]) << 16;
      }
    }
    if (kp > full && p_hi == kp) o[(full - out_p0) * kNr] = col[(k - 1) * rs];
  }
}

// Pairs [p0, p1) of a transposed-stored op(A) (element (r, c) at
// a[r + c * cs]) as rows of n words: out[p * n + r] = A[r][2p] |
// A[r][2p + 1] << 16 (a zero high half past k), the interleave of two
// contiguous stored rows, 32 words per permute pair.
// (Pair p goes to out + (p - out_p0) * n: a buffer of pairs [out_p0, ...).)
void PackPairs(const uint16_t* a, int64_t cs, int64_t n, int64_t k, int64_t p0,
               int64_t p1, uint32_t* out, int64_t out_p0 = 0) {
  const __m512i lo_idx = _mm512_set_epi16(
      47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
      38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_set_epi16(
      63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55,
      23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* x = a + 2 * p * cs;
    const bool has_hi = 2 * p + 1 < k;
    uint32_t* o = out + (p - out_p0) * n;
    for (int64_t r = 0; r < n; r += 32) {
      const int64_t left = n - r;
      const __mmask32 m =
          left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      const __m512i u = _mm512_maskz_loadu_epi16(m, x + r);
      const __m512i v = has_hi ? _mm512_maskz_loadu_epi16(m, x + cs + r) : zero;
      const __m512i lo = _mm512_permutex2var_epi16(u, lo_idx, v);
      const __m512i hi = _mm512_permutex2var_epi16(u, hi_idx, v);
      const __mmask16 m0 =
          left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 m1 =
          left >= 32 ? __mmask16(0xFFFF)
          : left <= 16 ? __mmask16(0)
                       : static_cast<__mmask16>((1u << (left - 16)) - 1);
      _mm512_mask_storeu_epi32(o + r, m0, lo);
      _mm512_mask_storeu_epi32(o + r + 16, m1, hi);
    }
  }
}

// ------------------------------------------------------------ microkernel

// Where a finished tile goes: rows x cols (<= kMr x kNr) of C at c.
struct Epilogue {
  void* c;  // the tile's first element
  bool f32;
  int64_t ldc;
  int64_t rows, cols;
  const float* bias;  // the tile's first column's bias, or null
  bool relu;
  const float* residual;  // the tile's first element's residual, or null
  int64_t ldr;            // the residual's row stride (floats)
  bool cast_round;        // bfloat16 C rounded as the Cast kernel does
};

// 16 floats to bfloat16 bits as the Cast kernel rounds (cast.h
// FloatToBfloat16Bits): (u + 0x7FFF + lsb) >> 16, a NaN the quiet NaN of
// its sign; denormals are kept (vcvtneps2bf16 flushes them).
inline __m256i CastRound16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(
      _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
      _mm512_set1_epi32(0x7FC0));
  r = _mm512_mask_mov_epi32(r, nan, quiet);
  return _mm512_cvtepi32_epi16(r);
}

// Writes 16 columns (q-th group) of one row: v + bias, relu, rounded.
inline void StoreRow16(const Epilogue& e, int64_t r, int64_t q, __m512 v) {
  const int64_t left = e.cols - q * 16;
  if (left <= 0) return;
  const __mmask16 mask =
      left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.bias + q * 16));
  if (e.residual) {
    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.residual + r * e.ldr + q * 16));
  }
  if (e.relu) {
    // The core's Relu: NaN stays NaN, negatives and -0 become +0.
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) |
                           _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    v = _mm512_maskz_mov_ps(keep, v);
  }
  if (e.f32) {
    float* row = static_cast<float*>(e.c) + r * e.ldc + q * 16;
    _mm512_mask_storeu_ps(row, mask, v);
  } else {
    uint16_t* row = static_cast<uint16_t*>(e.c) + r * e.ldc + q * 16;
    const __m256i h = e.cast_round ? CastRound16(v)
                                   : reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    _mm256_mask_storeu_epi16(row, mask, h);
  }
}

#define DG_BF16_ROW_DECL(r) __m512 c##r##0, c##r##1, c##r##2, c##r##3;
#define DG_BF16_ROW_ZERO(r) \
  c##r##0 = c##r##1 = c##r##2 = c##r##3 = _mm512_setzero_ps();
#define DG_BF16_ROW_LOAD(r)                             \
  c##r##0 = _mm512_load_ps(scratch + (r) * kNr + 0);  \
  c##r##1 = _mm512_load_ps(scratch + (r) * kNr + 16); \
  c##r##2 = _mm512_load_ps(scratch + (r) * kNr + 32); \
  c##r##3 = _mm512_load_ps(scratch + (r) * kNr + 48);
#define DG_BF16_ROW_SAVE(r)                              \
  _mm512_store_ps(scratch + (r) * kNr + 0, c##r##0);   \
  _mm512_store_ps(scratch + (r) * kNr + 16, c##r##1);  \
  _mm512_store_ps(scratch + (r) * kNr + 32, c##r##2);  \
  _mm512_store_ps(scratch + (r) * kNr + 48, c##r##3);
#define DG_BF16_ROW_FMA(r)                                              \
  {                                                                     \
    const __m512bh ar = reinterpret_cast<__m512bh>(                     \
        _mm512_set1_epi32(static_cast<int>(Load32(pa + (r) * a_rs))));  \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0);                        \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1);                        \
    c##r##2 = _mm512_dpbf16_ps(c##r##2, ar, b2);                        \
    c##r##3 = _mm512_dpbf16_ps(c##r##3, ar, b3);                        \
  }
#define DG_BF16_ROW_STORE(r)           \
  if ((r) < e.rows) {                  \
    StoreRow16(e, r, 0, c##r##0);      \
    StoreRow16(e, r, 1, c##r##1);      \
    StoreRow16(e, r, 2, c##r##2);      \
    StoreRow16(e, r, 3, c##r##3);      \
  }
// A whole tile without bias or relu: plain stores, no masks.
#define DG_BF16_ROW_STORE_F32(r)                               \
  {                                                            \
    float* row = static_cast<float*>(e.c) + (r) * e.ldc;      \
    _mm512_storeu_ps(row, c##r##0);                            \
    _mm512_storeu_ps(row + 16, c##r##1);                       \
    _mm512_storeu_ps(row + 32, c##r##2);                       \
    _mm512_storeu_ps(row + 48, c##r##3);                       \
  }
#define DG_BF16_ROW_STORE_BF16(r)                                          \
  {                                                                        \
    uint16_t* row = static_cast<uint16_t*>(e.c) + (r) * e.ldc;            \
    _mm512_storeu_si512(                                                   \
        row, _mm512_inserti64x4(                                           \
                 _mm512_castsi256_si512(reinterpret_cast<__m256i>(          \
                     _mm512_cvtneps_pbh(c##r##0))),                        \
                 reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(c##r##1)), 1)); \
    _mm512_storeu_si512(                                                   \
        row + 32,                                                          \
        _mm512_inserti64x4(                                                \
            _mm512_castsi256_si512(                                        \
                reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(c##r##2))),   \
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(c##r##3)), 1));   \
  }
#define DG_BF16_ALL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

// One kMr x kNr tile over `np` k pairs of A and the B panel pb. A's word
// (pair p, row r) is at pa + r * a_rs + p * a_ps bytes: a packed panel
// (a_rs 4, a_ps 4 kMr) or, read in place, rows of a row-major A with
// contiguous k (a_rs its row stride in bytes, a_ps 4). The accumulators
// start at zero (`resume` false) or at the partial sums in `scratch`
// (64-byte aligned, kTile floats); at the end they go to C through the
// epilogue (`finish`) or back to scratch.
//
// A finishing tile prefetches its C lines for writing (PREFETCHW), one
// line per k pair over its first pairs: C is written once, so its lines
// are usually not in cache, and 24 store misses at the end of every tile
// stalled the stores (measured on Zen 4, one core, C not in cache: the
// 1024 x 1024 float32 outputs of k = 256 went from 83-87% to 89-93% of the
// vdpbf16ps peak; docs/benchmarks.md). Spread over the loop, the
// requests overlap the arithmetic; all at once before it measured worse.
void Kernel(int64_t np, const char* pa, int64_t a_rs, int64_t a_ps,
            const uint32_t* pb, float* scratch, bool resume, bool finish,
            const Epilogue& e) {
  // Lines of C to prefetch: `lines` per row (the tile's row bytes rounded
  // up to 64), e.rows rows; line i is line i % lines of row i / lines.
  // A residual's lines are prefetched for reading the same way.
  int64_t prefetch = 0, lines = 1, row_bytes = 0;
  int64_t rprefetch = 0, rlines = 1;
  const char* cbase = static_cast<const char*>(e.c);
  const char* rbase = reinterpret_cast<const char*>(e.residual);
  if (finish) {
    const int64_t esize = e.f32 ? 4 : 2;
    lines = (e.cols * esize + 63) / 64;
    prefetch = e.rows * lines;
    row_bytes = e.ldc * esize;
    if (rbase) {
      rlines = (e.cols * 4 + 63) / 64;
      rprefetch = e.rows * rlines;
    }
  }
  DG_BF16_ALL_ROWS(DG_BF16_ROW_DECL)
  if (resume) {
    DG_BF16_ALL_ROWS(DG_BF16_ROW_LOAD)
  } else {
    DG_BF16_ALL_ROWS(DG_BF16_ROW_ZERO)
  }
  for (int64_t p = 0; p < np; ++p) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(pb));
    const __m512bh b1 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(pb + 16));
    const __m512bh b2 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(pb + 32));
    const __m512bh b3 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(pb + 48));
    DG_BF16_ALL_ROWS(DG_BF16_ROW_FMA)
    if (p < prefetch) {
      __builtin_prefetch(cbase + (p / lines) * row_bytes + (p % lines) * 64,
                         1, 3);
    }
    if (p < rprefetch) {
      __builtin_prefetch(rbase + (p / rlines) * e.ldr * 4 + (p % rlines) * 64,
                         0, 3);
    }
    pa += a_ps;
    pb += kNr;
  }
  if (finish && e.rows == kMr && e.cols == kNr && !e.bias && !e.relu &&
      !e.residual && !e.cast_round) {
    if (e.f32) {
      DG_BF16_ALL_ROWS(DG_BF16_ROW_STORE_F32)
    } else {
      DG_BF16_ALL_ROWS(DG_BF16_ROW_STORE_BF16)
    }
  } else if (finish) {
    DG_BF16_ALL_ROWS(DG_BF16_ROW_STORE)
  } else {
    DG_BF16_ALL_ROWS(DG_BF16_ROW_SAVE)
  }
}

#undef DG_BF16_ROW_DECL
#undef DG_BF16_ROW_ZERO
#undef DG_BF16_ROW_LOAD
#undef DG_BF16_ROW_SAVE
#undef DG_BF16_ROW_FMA
#undef DG_BF16_ROW_STORE
#undef DG_BF16_ROW_STORE_F32
#undef DG_BF16_ROW_STORE_BF16
#undef DG_BF16_ALL_ROWS

// ------------------------------------------------------------ products

// Sizes of one product's packed operands and scratch, in bytes.
struct Sizes {
  int64_t kp, npa, npb;
  int64_t a_bytes, b_bytes, scratch_bytes;
  // A is read in place (rows with contiguous k, even k, few B panels):
  // only a ragged last panel (n not a multiple of kMr) is packed.
  bool direct_a;
  // A is stored transposed (rows contiguous for each k: a_rs == 1): it is
  // packed once into k-pair rows of all n rows (PackPairs), which the
  // microkernel reads with a row step of one word and a pair step of n
  // words, instead of into kMr-row panels (a 128-bit interleave per pair
  // and panel).
  bool pair_a;
  // A split-k product (SplitK): the sum over pairs [0, half) and the sum
  // over [half, kp), each in order, into the float32 partials lo and hi
  // (partial_bytes each), then C = epilogue(lo + hi).
  bool split_k;
  int64_t half, partial_bytes;
};

// Whether a product is summed in two halves of k (split-k): a single
// product over at least kSplitKPairs pairs whose operands both run along
// k down their stored rows (A stored transposed, packed as pair rows; B
// row-major), n and m at least 32. These are the weight gradients dy^T x,
// whose operands are the activations and gradients of the tokens, which
// the ops before wrote split by rows (tokens) between the threads: with k
// split in halves each thread packs and multiplies the rows it wrote, and
// only the float32 partial sums (n x m, smaller than the operands) cross
// between the cores, where splitting C made each thread read half of both
// packed operands from the other core (docs/benchmarks.md, session 21:
// ~5x the cost of a local line when the host places the cores on
// different dies). The halves are fixed by the shape, not the thread
// count, so the bits are the same on one thread or two: C = (sum over the
// first half, in order) + (sum over the second half, in order), then the
// epilogue. The rule is symmetric in (A, B) -> (B^T, A^T), so the product
// and its transpose still give the same bits (the matmul_transpose pass).
constexpr int64_t kSplitKPairs = 512;

bool SplitK(const Bf16GemmCall& g, const Sizes& s) {
  return g.batch == 1 && s.pair_a && g.b_cs == 1 && g.b_rs != 1 &&
         g.n >= 32 && g.m >= 32 && s.kp >= kSplitKPairs;
}

Sizes SizesOf(const Bf16GemmCall& g) {
  Sizes s;
  s.kp = CeilDiv(g.k, 2);
  s.npa = CeilDiv(g.n, kMr);
  s.npb = CeilDiv(g.m, kNr);
  s.a_bytes = Align64(s.npa * s.kp * kMr * 4);
  s.b_bytes = Align64(s.npb * s.kp * kNr * 4);
  // Partial sums are kept only when k spans more than one chunk.
  s.scratch_bytes = s.kp > kKcPairs ? kMcPanels * kNcPanels * kTile * 4 : 0;
  // Measured: reading A in place beats packing it when a panel of A meets
  // few B panels (up to 8, m <= 512), where its packing is paid for by
  // little work; with more, the packed panel's single stream is faster.
  s.direct_a = g.a_cs == 1 && g.k > 0 && g.k % 2 == 0 && s.npb <= 8;
  s.pair_a = !s.direct_a && g.a_rs == 1 && g.a_cs != 1 && g.k > 1 &&
             g.n >= 32;
  if (s.pair_a) {
    // kp rows of n words, plus kMr words so that the ragged last panel's
    // rows past n read (unused) words inside the buffer.
    s.a_bytes = Align64((s.kp * g.n + kMr) * 4);
  }
  s.split_k = SplitK(g, s);
  s.half = s.kp / 2;
  s.partial_bytes = s.split_k ? Align64(g.n * g.m * 4) : 0;
  if (s.split_k) {  // each half runs in chunks of its own
    s.scratch_bytes = s.kp - s.half > kKcPairs ? kMcPanels * kNcPanels * kTile * 4 : 0;
  }
  return s;
}

// How a call runs: `team` threads, over batch items or within each product.
struct Plan {
  int team;
  bool over_batch;
};

Plan PlanOf(const Bf16GemmCall& g) {
  const double flops = 2.0 * static_cast<double>(g.n) *
                       static_cast<double>(g.m) *
                       static_cast<double>(g.k > 0 ? g.k : 1);
  const int threads = g.threads > 1 ? g.threads : 1;
  Plan plan{1, false};
  if (g.batch > 1 && threads > 1 &&
      flops * static_cast<double>(g.batch) >= kSerialFlops &&
      (flops < kBatchParallelFlops || g.batch >= 4 * threads)) {
    plan.over_batch = true;
    plan.team = static_cast<int>(g.batch < threads ? g.batch : threads);
    return plan;
  }
  const double want = flops / kFlopsPerThread;
  plan.team = want >= threads ? threads : want >= 1 ? static_cast<int>(want) : 1;
  return plan;
}

// C panels [ip0, ip1) x [jp0, jp1) of one product from its packed panels,
// on the calling thread.
// Pairs [p_begin, p_end) (all by default; a split-k half otherwise), the
// tiles starting at zero.
// The packed pair rows of A and the B panels may hold pairs [pairs_at,
// pairs_at + b_panel_pairs) only (a split-k thread's half; all by default).
void ComputeRegion(const Bf16GemmCall& g, const Sizes& s, const uint16_t* a,
                   const uint32_t* ap, const uint32_t* bp, char* c,
                   float* scratch, int64_t ip0, int64_t ip1, int64_t jp0,
                   int64_t jp1, int64_t p_begin = 0, int64_t p_end = -1,
                   int64_t pairs_at = 0, int64_t b_panel_pairs = -1,
                   int64_t ip_at = 0) {
  if (p_end < 0) p_end = s.kp;
  if (b_panel_pairs < 0) b_panel_pairs = s.kp;
  const int64_t esize = g.c_f32 ? 4 : 2;
  for (int64_t jc = jp0; jc < jp1; jc += kNcPanels) {
    const int64_t jce = jc + kNcPanels < jp1 ? jc + kNcPanels : jp1;
    for (int64_t ic = ip0; ic < ip1; ic += kMcPanels) {
      const int64_t ice = ic + kMcPanels < ip1 ? ic + kMcPanels : ip1;
      int64_t pc = p_begin;
      for (;;) {
        const int64_t pe = pc + kKcPairs < p_end ? pc + kKcPairs : p_end;
        const bool resume = pc > p_begin, finish = pe == p_end;
        for (int64_t jp = jc; jp < jce; ++jp) {
          const uint32_t* pb = bp + (jp * b_panel_pairs + pc - pairs_at) * kNr;
          const int64_t j0 = jp * kNr;
          for (int64_t ip = ic; ip < ice; ++ip) {
            const int64_t i0 = ip * kMr;
            Epilogue e;
            e.c = c + (i0 * g.ldc + j0) * esize;
            e.f32 = g.c_f32;
            e.ldc = g.ldc;
            e.rows = g.n - i0 < kMr ? g.n - i0 : kMr;
            e.cols = g.m - j0 < kNr ? g.m - j0 : kNr;
            e.bias = g.bias ? g.bias + j0 : nullptr;
            e.relu = g.relu;
            e.residual = g.residual ? g.residual + i0 * g.ld_residual + j0 : nullptr;
            e.ldr = g.ld_residual;
            e.cast_round = g.cast_round;
            float* tile =
                scratch ? scratch + ((ip - ic) * kNcPanels + (jp - jc)) * kTile
                        : nullptr;
            if (s.pair_a) {
              Kernel(pe - pc,
                     reinterpret_cast<const char*>(ap + (pc - pairs_at) * g.n + i0), 4,
                     4 * g.n, pb, tile, resume, finish, e);
            } else if (s.direct_a && i0 + kMr <= g.n) {
              Kernel(pe - pc,
                     reinterpret_cast<const char*>(a + i0 * g.a_rs + 2 * pc),
                     g.a_rs * 2, 4, pb, tile, resume, finish, e);
            } else {
              Kernel(pe - pc,
                     reinterpret_cast<const char*>(ap + ((ip - ip_at) * s.kp + pc) * kMr),
                     4, 4 * kMr, pb, tile, resume, finish, e);
            }
          }
        }
        if (finish) break;
        pc = pe;
      }
    }
  }
}

// The call whose C is a split-k partial: float32, dense (ldc m), no
// epilogue.
Bf16GemmCall PartialCall(const Bf16GemmCall& g) {
  Bf16GemmCall p = g;
  p.c_f32 = true;
  p.ldc = g.m;
  p.bias = nullptr;
  p.relu = false;
  p.residual = nullptr;
  p.cast_round = false;
  return p;
}

// Rows [r0, r1) of a split-k C: lo + hi (one float32 addition), then the
// call's epilogue (bias, residual, relu, rounding), as a tile's epilogue
// applies it to its accumulators.
void FinishSplit(const Bf16GemmCall& g, const float* lo, const float* hi,
                 char* c, int64_t r0, int64_t r1) {
  const int64_t esize = g.c_f32 ? 4 : 2;
  for (int64_t r = r0; r < r1; ++r) {
    Epilogue e;
    e.c = c + r * g.ldc * esize;
    e.f32 = g.c_f32;
    e.ldc = g.ldc;
    e.rows = 1;
    e.cols = g.m;
    e.bias = g.bias;
    e.relu = g.relu;
    e.residual = g.residual ? g.residual + r * g.ld_residual : nullptr;
    e.ldr = g.ld_residual;
    e.cast_round = g.cast_round;
    const float* x = lo + r * g.m;
    const float* y = hi + r * g.m;
    for (int64_t q = 0; q * 16 < g.m; ++q) {
      const int64_t left = g.m - q * 16;
      const __mmask16 mask =
          left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      StoreRow16(e, 0, q,
                 _mm512_add_ps(_mm512_maskz_loadu_ps(mask, x + q * 16),
                               _mm512_maskz_loadu_ps(mask, y + q * 16)));
    }
  }
}

// Packs panels [lo, hi) of A (or B) of one product.
// With pair_a, [lo, hi) are panels scaled to k pairs (a thread's share).
void PackARange(const Bf16GemmCall& g, const Sizes& s, const uint16_t* a,
                uint32_t* ap, int64_t lo, int64_t hi) {
  if (s.pair_a) {
    PackPairs(a, g.a_cs, g.n, g.k, s.kp * lo / s.npa, s.kp * hi / s.npa, ap);
    if (hi == s.npa) {
      for (int64_t i = 0; i < kMr; ++i) ap[s.kp * g.n + i] = 0;
    }
    return;
  }
  for (int64_t ip = lo; ip < hi; ++ip) {
    const int64_t i0 = ip * kMr;
    if (s.direct_a && i0 + kMr <= g.n) continue;  // read in place
    PackA(a, g.a_rs, g.a_cs, i0, g.n - i0 < kMr ? g.n - i0 : kMr, g.k,
          ap + ip * s.kp * kMr);
  }
}

void PackBRange(const Bf16GemmCall& g, const Sizes& s, const uint16_t* b,
                uint32_t* bp, int64_t lo, int64_t hi) {
  for (int64_t jp = lo; jp < hi; ++jp) {
    const int64_t j0 = jp * kNr;
    PackB(b, g.b_rs, g.b_cs, j0, g.m - j0 < kNr ? g.m - j0 : kNr, g.k,
          bp + jp * s.kp * kNr);
  }
}

// One whole product on the calling thread, with its own buffers at ws.
void SerialProduct(const Bf16GemmCall& g, const Sizes& s, const uint16_t* a,
                   const uint16_t* b, char* c, char* ws) {
  uint32_t* ap = reinterpret_cast<uint32_t*>(ws);
  uint32_t* bp = reinterpret_cast<uint32_t*>(ws + s.a_bytes);
  float* scratch = s.scratch_bytes
                       ? reinterpret_cast<float*>(ws + s.a_bytes + s.b_bytes)
                       : nullptr;
  PackARange(g, s, a, ap, 0, s.npa);
  PackBRange(g, s, b, bp, 0, s.npb);
  if (s.split_k) {
    char* lo = ws + s.a_bytes + s.b_bytes + s.scratch_bytes;
    char* hi = lo + s.partial_bytes;
    const Bf16GemmCall pg = PartialCall(g);
    ComputeRegion(pg, s, a, ap, bp, lo, scratch, 0, s.npa, 0, s.npb, 0, s.half);
    ComputeRegion(pg, s, a, ap, bp, hi, scratch, 0, s.npa, 0, s.npb, s.half, s.kp);
    FinishSplit(g, reinterpret_cast<const float*>(lo),
                reinterpret_cast<const float*>(hi), c, 0, g.n);
    return;
  }
  ComputeRegion(g, s, a, ap, bp, c, scratch, 0, s.npa, 0, s.npb);
}

// A split-k product on two threads: thread h packs and sums half h of the
// pairs over all of C into its partial, in its own scratch (its share of
// the shared workspace when that cannot be had); then each finishes half
// the rows.
void SplitProduct(const Bf16GemmCall& g, const Sizes& s, const uint16_t* a,
                  const uint16_t* b, char* c, char* ws) {
  const Bf16GemmCall pg = PartialCall(g);
  float* partial[2] = {nullptr, nullptr};
#pragma omp parallel num_threads(2)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t p0 = t == 0 ? 0 : s.half, p1 = t == 0 ? s.half : s.kp;
    const int64_t np = p1 - p0;
    const int64_t a_bytes = Align64((np * g.n + kMr) * 4);
    const int64_t b_bytes = Align64(s.npb * np * kNr * 4);
    char* mine = ThreadScratch(a_bytes + b_bytes + s.scratch_bytes + s.partial_bytes);
    uint32_t *ap, *bp;
    float* scratch;
    int64_t pairs_at, panel_pairs;
    if (mine != nullptr) {  // this half's pairs only
      ap = reinterpret_cast<uint32_t*>(mine);
      bp = reinterpret_cast<uint32_t*>(mine + a_bytes);
      scratch = reinterpret_cast<float*>(mine + a_bytes + b_bytes);
      partial[t] = reinterpret_cast<float*>(mine + a_bytes + b_bytes + s.scratch_bytes);
      pairs_at = p0, panel_pairs = np;
    } else {  // the workspace's whole-k layout, this half of it
      ap = reinterpret_cast<uint32_t*>(ws);
      bp = reinterpret_cast<uint32_t*>(ws + s.a_bytes);
      char* rest = ws + s.a_bytes + s.b_bytes;
      scratch = reinterpret_cast<float*>(rest + t * s.scratch_bytes);
      partial[t] = reinterpret_cast<float*>(rest + 2 * s.scratch_bytes +
                                            t * s.partial_bytes);
      pairs_at = 0, panel_pairs = s.kp;
    }
    if (s.scratch_bytes == 0) scratch = nullptr;
    // The pair rows of this half, and kMr zero words after them that the
    // ragged last panel's rows past n read (past the last pair row only in
    // the whole-k layout; inside this half's buffer otherwise).
    PackPairs(a, g.a_cs, g.n, g.k, p0, p1, ap, pairs_at);
    uint32_t* after = ap + (p1 - pairs_at) * g.n;
    if (mine != nullptr || t == 1) {
      for (int64_t i = 0; i < kMr; ++i) after[i] = 0;
    }
    for (int64_t jp = 0; jp < s.npb; ++jp) {
      const int64_t j0 = jp * kNr;
      PackB(b, g.b_rs, g.b_cs, j0, g.m - j0 < kNr ? g.m - j0 : kNr, g.k,
            bp + jp * panel_pairs * kNr, p0, p1, pairs_at);
    }
    // In the whole-k layout the ragged last panel of the first half reads
    // into the second half's first pair row: wait for both halves.
#pragma omp barrier
    ComputeRegion(pg, s, a, ap, bp, reinterpret_cast<char*>(partial[t]), scratch,
                  0, s.npa, 0, s.npb, p0, p1, pairs_at, panel_pairs);
#pragma omp barrier
    FinishSplit(g, partial[0], partial[1], c, g.n * t / 2, g.n * (t + 1) / 2);
  }
}

// One product on `team` threads: both operands packed once, in parallel,
// then C split into `team` parts of whole panels along its longer side.
void ParallelProduct(const Bf16GemmCall& g, const Sizes& s, const uint16_t* a,
                     const uint16_t* b, char* c, char* ws, int team) {
  uint32_t* ap = reinterpret_cast<uint32_t*>(ws);
  uint32_t* bp = reinterpret_cast<uint32_t*>(ws + s.a_bytes);
  char* scratch_base = ws + s.a_bytes + s.b_bytes;
  const bool by_rows = s.npa * kMr >= s.npb * kNr;
  // A row-major B (rows of k contiguous) is packed by k pairs, not by
  // panels: thread t packs its share of the rows of every panel, the rows
  // the same thread wrote in the op before (outputs split by rows: the
  // element-wise and row kernels, this GEMM's own row panels), so the
  // source is read where it was written; split by panels, half of every
  // thread's rows came from the other core, which costs ~5x a local line
  // when the host places the cores on different dies (see batched_f32.cc
  // ForEachItem; docs/benchmarks.md, session 21). A stored transposed B
  // (columns contiguous) keeps the panel split, which is its row split.
  const bool by_pairs = g.b_cs == 1;
  // Split by rows, a thread's packed A panels are its own: they go in its
  // own scratch (ThreadScratch; the shared workspace when that cannot be
  // had), so their lines stay in its core from call to call.
  const bool own_a = by_rows && !s.direct_a && !s.pair_a;
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t ia = s.npa * t / nt, ib = s.npa * (t + 1) / nt;
    uint32_t* my_ap = ap;
    int64_t ip_at = 0;
    if (own_a) {
      char* mine = ThreadScratch((ib - ia) * s.kp * kMr * 4);
      if (mine != nullptr) {
        my_ap = reinterpret_cast<uint32_t*>(mine);
        ip_at = ia;
      }
    }
    if (ip_at == ia && own_a && my_ap != ap) {
      for (int64_t ip = ia; ip < ib; ++ip) {
        const int64_t i0 = ip * kMr;
        PackA(a, g.a_rs, g.a_cs, i0, g.n - i0 < kMr ? g.n - i0 : kMr, g.k,
              my_ap + (ip - ia) * s.kp * kMr);
      }
    } else {
      PackARange(g, s, a, ap, ia, ib);
    }
    if (by_pairs) {
      for (int64_t jp = 0; jp < s.npb; ++jp) {
        const int64_t j0 = jp * kNr;
        PackB(b, g.b_rs, g.b_cs, j0, g.m - j0 < kNr ? g.m - j0 : kNr, g.k,
              bp + jp * s.kp * kNr, s.kp * t / nt, s.kp * (t + 1) / nt);
      }
    } else {
      PackBRange(g, s, b, bp, s.npb * t / nt, s.npb * (t + 1) / nt);
    }
#pragma omp barrier
    float* scratch =
        s.scratch_bytes
            ? reinterpret_cast<float*>(scratch_base + t * s.scratch_bytes)
            : nullptr;
    if (by_rows) {
      ComputeRegion(g, s, a, my_ap, bp, c, scratch, ia, ib, 0, s.npb, 0, -1, 0,
                    -1, ip_at);
    } else {
      ComputeRegion(g, s, a, ap, bp, c, scratch, 0, s.npa, s.npb * t / nt,
                    s.npb * (t + 1) / nt);
    }
  }
}

}  // namespace

int64_t WorkspaceBytes(const Bf16GemmCall& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return 0;
  const Sizes s = SizesOf(g);
  const Plan plan = PlanOf(g);
  if (plan.over_batch) {
    return plan.team * (s.a_bytes + s.b_bytes + s.scratch_bytes);
  }
  if (s.split_k) {  // both partials, and a chunk scratch per half
    return s.a_bytes + s.b_bytes + 2 * s.scratch_bytes + 2 * s.partial_bytes;
  }
  return s.a_bytes + s.b_bytes + plan.team * s.scratch_bytes;
}

void Gemm(const Bf16GemmCall& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return;
  const Sizes s = SizesOf(g);
  const Plan plan = PlanOf(g);
  char* ws = static_cast<char*>(g.workspace);
  char* c = static_cast<char*>(g.c);
  const int64_t esize = g.c_f32 ? 4 : 2;
  const auto a_of = [&g](int64_t i) {
    return g.a + (g.a_offsets ? g.a_offsets[i] : 0);
  };
  const auto b_of = [&g](int64_t i) {
    return g.b + (g.b_offsets ? g.b_offsets[i] : 0);
  };
  if (plan.over_batch) {
    const int64_t per = s.a_bytes + s.b_bytes + s.scratch_bytes;
    // Items one at a time: a descheduled thread (a shared machine) holds
    // up one item, not a fixed share; an item's bits do not depend on its
    // thread.
#pragma omp parallel num_threads(plan.team)
    {
      char* mine = ws + omp_get_thread_num() * per;
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < g.batch; ++i) {
        SerialProduct(g, s, a_of(i), b_of(i), c + i * g.c_stride * esize,
                      mine);
      }
    }
    return;
  }
  if (s.split_k) {  // batch 1
    if (plan.team > 1) {
      SplitProduct(g, s, a_of(0), b_of(0), c, ws);
    } else {
      SerialProduct(g, s, a_of(0), b_of(0), c, ws);
    }
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i) {
    if (plan.team > 1) {
      ParallelProduct(g, s, a_of(i), b_of(i), c + i * g.c_stride * esize, ws,
                      plan.team);
    } else {
      SerialProduct(g, s, a_of(i), b_of(i), c + i * g.c_stride * esize, ws);
    }
  }
}

}  // namespace gemm_bf16
}  // namespace cpu_eigen
