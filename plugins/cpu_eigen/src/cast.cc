// Cast: any of the ten dtypes to any other. One kernel per input dtype; it
// switches on the output dtype. Conversion rules are in cast.h.
#include "cast.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

void FloatToBfloat16Base(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToBfloat16Bits(x[i]);
}

// `rows` dense runs of `inner` values, run r at x + offsets[r] (x +
// r * x_step when offsets is null), to y + r * y_step: the strided cast's
// dense runs (a head split or merge) and the rows of a transposed tile in
// one call, so the per-run cost is a few instructions.
void FloatRowsToBfloat16Base(const float* x, const int64_t* offsets, int64_t x_step,
                             int64_t rows, int64_t inner, uint16_t* y, int64_t y_step) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = x + (offsets ? offsets[r] : r * x_step);
    uint16_t* d = y + r * y_step;
    for (int64_t i = 0; i < inner; ++i) d[i] = FloatToBfloat16Bits(s[i]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The conversion with AVX512-BF16's vcvtneps2bf16 (16 lanes, nearest-even in
// one instruction; issue 21: the bfloat16 encoder step's 20 Casts are
// bounded by the bit arithmetic's instruction count, not by memory). The
// instruction reads subnormal inputs as zero and makes a NaN quiet by
// keeping its upper bits, where FloatToBfloat16Bits keeps a subnormal's
// rounded bits and gives the quiet NaN of the sign; lanes holding a NaN or a
// nonzero subnormal take FloatToBfloat16Bits' arithmetic (vectorised, a
// blend), so every result is bit for bit FloatToBfloat16Bits'
// (tests/ops/test_cast_bf16_insn.py, every exponent and sign with the
// rounding cases of the low bits).
#define CPU_EIGEN_BF16_TARGET \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi2")))

CPU_EIGEN_BF16_TARGET inline void FloatToBfloat16Run16(const float* x,
                                                      uint16_t* y) {
  const __m512 v = _mm512_loadu_ps(x);
  const __m512i u = _mm512_castps_si512(v);
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  // NaN: mag > 0x7F800000; nonzero subnormal: mag - 1 < 0x007FFFFF unsigned.
  const __mmask16 odd =
      _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7F800000)) |
      _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                              _mm512_set1_epi32(0x007FFFFF));
  if (__builtin_expect(odd != 0, 0)) {
    // FloatToBfloat16Bits, 16 lanes (masked forms: gcc 12 warns that the
    // unmasked ones' undefined pass-through may be uninitialised).
    const __m512i lsb =
        _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_maskz_srli_epi32(
        0xFFFF,
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb),
        16);
    const __m512i nan = _mm512_or_si512(
        _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, u, 16), _mm512_set1_epi32(0x8000)),
        _mm512_set1_epi32(0x7FC0));
    const __mmask16 is_nan =
        _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7F800000));
    const __m512i fixed = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    r = _mm512_mask_cvtepi32_epi16(r, odd, fixed);  // odd lanes replaced
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), r);
}

CPU_EIGEN_BF16_TARGET void FloatToBfloat16Bf16(const float* x, uint16_t* y,
                                               int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) FloatToBfloat16Run16(x + i, y + i);
  for (; i < n; ++i) y[i] = FloatToBfloat16Bits(x[i]);
}

CPU_EIGEN_BF16_TARGET void FloatRowsToBfloat16Bf16(const float* x,
                                                   const int64_t* offsets,
                                                   int64_t x_step, int64_t rows,
                                                   int64_t inner, uint16_t* y,
                                                   int64_t y_step) {
  for (int64_t r = 0; r < rows; ++r) {
    FloatToBfloat16Bf16(x + (offsets ? offsets[r] : r * x_step), y + r * y_step,
                        inner);
  }
}

// Whether the AVX512-BF16 conversion serves: the CPU has it, the x86-64-v4
// build is allowed (DRAGON_CPU_EIGEN_ISA caps it like every AVX-512 path)
// and DRAGON_CPU_EIGEN_CVT_BF16 is not 0 (read once, at first use: for
// benchmarks and tests of the other path). Same bits either way.
bool UseBf16Insn() {
  static const bool use = [] {
    if (DetectIsaLevel() < 4 || !__builtin_cpu_supports("avx512bf16")) {
      return false;
    }
    const char* env = std::getenv("DRAGON_CPU_EIGEN_CVT_BF16");
    return !(env != nullptr && env[0] == '0' && env[1] == '\0');
  }();
  return use;
}

// The same loop for AVX-512 (x86-64-v4): 16 lanes and vpmovdw, ~3x the
// baseline's SSE2 rate on a 256K activation.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx2,fma,bmi2")))
void FloatToBfloat16V4(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToBfloat16Bits(x[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx2,fma,bmi2")))
void FloatRowsToBfloat16V4(const float* x, const int64_t* offsets, int64_t x_step,
                           int64_t rows, int64_t inner, uint16_t* y, int64_t y_step) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = x + (offsets ? offsets[r] : r * x_step);
    uint16_t* d = y + r * y_step;
    for (int64_t i = 0; i < inner; ++i) d[i] = FloatToBfloat16Bits(s[i]);
  }
}
#endif

}  // namespace

void FloatToBfloat16(const float* x, Eigen::bfloat16* y, int64_t n) {
  uint16_t* out = reinterpret_cast<uint16_t*>(y);
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool bf16 = UseBf16Insn();
  if (bf16) {
    FloatToBfloat16Bf16(x, out, n);
    return;
  }
  static const bool v4 = DetectIsaLevel() >= 4;
  if (v4) {
    FloatToBfloat16V4(x, out, n);
    return;
  }
#endif
  FloatToBfloat16Base(x, out, n);
}

namespace {

void FloatRowsToBfloat16(const float* x, const int64_t* offsets, int64_t x_step, int64_t rows,
                         int64_t inner, Eigen::bfloat16* y, int64_t y_step) {
  uint16_t* out = reinterpret_cast<uint16_t*>(y);
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool bf16 = UseBf16Insn();
  if (bf16) {
    FloatRowsToBfloat16Bf16(x, offsets, x_step, rows, inner, out, y_step);
    return;
  }
  static const bool v4 = DetectIsaLevel() >= 4;
  if (v4) {
    FloatRowsToBfloat16V4(x, offsets, x_step, rows, inner, out, y_step);
    return;
  }
#endif
  FloatRowsToBfloat16Base(x, offsets, x_step, rows, inner, out, y_step);
}

// n contiguous values converted on the calling thread: the vectorised bit
// arithmetic for the mixed-precision pair (float32 <-> bfloat16, the same
// bits as Convert), Convert for every other pair.
template <typename In, typename Out>
void ConvertRun(const In* x, Out* y, int64_t n) {
  if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, Eigen::bfloat16>) {
    FloatToBfloat16(x, y, n);
  } else if constexpr (std::is_same_v<In, Eigen::bfloat16> && std::is_same_v<Out, float>) {
    Bfloat16ToFloat(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = Convert<Out>(x[i]);
  }
}

// Dense runs of `inner` values, run r at x + offsets[r] (x + r * x_step
// when offsets is null), to y + r * y_step.
template <typename In, typename Out>
void ConvertRows(const In* x, const int64_t* offsets, int64_t x_step, int64_t rows,
                 int64_t inner, Out* y, int64_t y_step) {
  if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, Eigen::bfloat16>) {
    FloatRowsToBfloat16(x, offsets, x_step, rows, inner, y, y_step);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      ConvertRun(x + (offsets ? offsets[r] : r * x_step), y + r * y_step, inner);
  }
}

template <typename In, typename Out>
void CastLoop(const In* x, Out* y, int64_t n) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    ConvertRun(x + begin, y + begin, end - begin);
  });
}

// Values gathered into a small buffer before ConvertRun, so a strided read
// still converts with the vectorised loop.
constexpr int64_t kGather = 256;

// y[0..n) = x[0], x[step], ... converted (step in elements, any sign; 0
// broadcasts one value).
template <typename In, typename Out>
void ConvertStridedRun(const In* x, int64_t step, Out* y, int64_t n) {
  if (step == 1) {
    ConvertRun(x, y, n);
  } else if (step == 0) {
    Out v{};
    ConvertRun(x, &v, 1);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  } else {
    In buf[kGather];
    for (int64_t b = 0; b < n; b += kGather) {
      const int64_t m = std::min(kGather, n - b);
      for (int64_t i = 0; i < m; ++i) buf[i] = x[(b + i) * step];
      ConvertRun(buf, y + b, m);
    }
  }
}

// Elements per block of work of a thread (a staging buffer of at most 16
// KiB, which stays in L1): short rows are handled kStage elements at a
// time, so the vectorised conversion is one call per block, not per row.
constexpr int64_t kStage = 2048;

// Rows path of the strided cast: one input row per innermost dimension of
// the simplified layout, rows walked with an odometer (as CopyRows). The
// output is dense, so consecutive rows are consecutive output. Dense rows
// (a head split or merge) are converted where they are, a block of rows per
// ConvertRows call; element-strided or broadcast rows are gathered into the
// staging buffer and converted together; a row longer than half a block is
// converted on its own.
template <typename In, typename Out>
void CastRows(const internal::CopyLayout& l, const In* src, Out* dst) {
  constexpr int64_t N = static_cast<int64_t>(sizeof(In));
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  const int64_t inner = l.shape[nd - 1], step = l.src[nd - 1];
  std::vector<int64_t> outer_dims;
  int64_t rows = 1;
  for (int64_t k = 0; k + 1 < nd; ++k) {
    outer_dims.push_back(k);
    rows *= l.shape[k];
  }
  if (rows < 4) {
    // Few long rows (e.g. a 1-D strided view): parallelise inside each row.
    for (int64_t r = 0; r < rows; ++r) {
      int64_t so = 0, dof = 0;
      internal::Unravel(r, outer_dims, l.shape, l.src, l.dst, nullptr, &so, &dof);
      ParallelFor(inner, [&](int64_t begin, int64_t end) {
        ConvertStridedRun(src + so + begin * step, step, dst + r * inner + begin, end - begin);
      });
    }
    return;
  }
  const int64_t no = nd - 1;
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        In stage[kStage];
        int64_t idx[kMaxDims];  // no allocation: nothing may throw here
        int64_t so = 0, dof = 0;
        internal::Unravel(begin, outer_dims, l.shape, l.src, l.dst, idx, &so, &dof);
        auto next = [&]() {
          for (int64_t k = no - 1; k >= 0; --k) {
            so += l.src[k];
            if (++idx[k] < l.shape[k]) return;
            so -= l.src[k] * l.shape[k];
            idx[k] = 0;
          }
        };
        int64_t r = begin;
        while (r < end) {
          if (inner * 2 > kStage) {  // a long row: converted on its own
            ConvertStridedRun(src + so, step, dst + r * inner, inner);
            next();
            ++r;
            continue;
          }
          const int64_t r0 = r;
          if (step == 1) {  // dense runs: converted where they are
            int64_t offsets[kStage];
            int64_t m = 0;
            for (; r < end && (m + 1) * inner <= kStage; ++r, ++m) {
              offsets[m] = so;
              next();
            }
            ConvertRows(src, offsets, 0, m, inner, dst + r0 * inner, inner);
            continue;
          }
          int64_t m = 0;
          for (; r < end && m + inner <= kStage; ++r, m += inner) {
            internal::CopyRow<sizeof(In)>(reinterpret_cast<char*>(stage + m), N,
                                          reinterpret_cast<const char*>(src + so),
                                          step * N, inner);
            next();
          }
          ConvertRun(stage, dst + r0 * inner, m);
        }
      },
      inner);
}

// Transposing path: the output is dense along the last dim, the input along
// dim j. A tile of kTile values of j by kChunk of the last dim is transposed
// into the staging buffer (CopyTile: 4x4 register blocks for 4-byte
// elements), whose rows are then converted into the output. A work item is
// one run of up to kTile values of j by kSpan values of the last dim.
template <typename In, typename Out>
void CastTiles(const internal::CopyLayout& l, int64_t j, const In* src, Out* dst) {
  constexpr int64_t N = static_cast<int64_t>(sizeof(In));
  constexpr int64_t kTile = 32, kChunk = kStage / kTile, kSpan = 32 * kChunk;
  const int64_t last = static_cast<int64_t>(l.shape.size()) - 1;
  const int64_t nl = l.shape[last];
  const int64_t sl = l.src[last], dj = l.dst[j];
  internal::ForEachTile(
      l, j, kTile, kSpan, l.src, l.dst, kTile * std::min(nl, kSpan),
      [&](int64_t so, int64_t dof, int64_t j0, int64_t j1, int64_t span0, int64_t span1) {
        In stage[kStage];
        for (int64_t l0 = span0; l0 < span1; l0 += kChunk) {
          const int64_t len = std::min(span1, l0 + kChunk) - l0;
          // stage[jj][ll] = src[(j0 + jj) + (l0 + ll) * sl]
          internal::CopyTile<sizeof(In)>(
              reinterpret_cast<char*>(stage), len * N,
              reinterpret_cast<const char*>(src + so + j0 + l0 * sl), sl * N, 0,
              j1 - j0, 0, len);
          ConvertRows(stage, nullptr, len, j1 - j0, len, dst + dof + j0 * dj + l0, dj);
        }
      });
}

// Casts x, read through its strides (any: zero, negative, a byte offset),
// into the dense y: one pass, no dense copy of x first.
template <typename In, typename Out>
void StridedCast(const dg::TensorRef& x, Out* y) {
  const std::vector<int64_t> shape = x.shape();
  const std::vector<int64_t> dense = ContiguousStrides(shape);
  DG_CHECK(x.ndim() <= kMaxDims, DG_UNIMPLEMENTED, "Cast of rank ", x.ndim(),
           " (at most ", kMaxDims, " dimensions are supported)");
  const internal::CopyLayout l =
      internal::Simplify(x.ndim(), shape.data(), x.raw()->strides, dense.data());
  const In* s = static_cast<const In*>(x.raw_data());
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  if (nd == 0) {  // one element
    ConvertRun(s, y, 1);
    return;
  }
  if (nd == 1 && l.src[0] == 1) {
    CastLoop(s, y, l.shape[0]);
    return;
  }
  // A transpose: tiles pay when the dim the input is dense along is long.
  if (l.src[nd - 1] != 1 && l.src[nd - 1] != 0) {
    for (int64_t j = nd - 2; j >= 0; --j) {
      if (l.src[j] == 1 && l.shape[j] >= 8) {
        CastTiles(l, j, s, y);
        return;
      }
    }
  }
  CastRows(l, s, y);
}

// Reads x through its strides (DG_KERNEL_STRIDED_INPUTS): a transposed,
// sliced or broadcast view is converted in one pass instead of being made
// dense by the core first.
template <typename In>
void CastKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": input has ",
           x.numel(), " elements, output ", y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DG_CHECK(y.is_contiguous(), DG_INTERNAL, ctx.op_name(),
           ": the output must be contiguous");
  if (y.dtype() == x.dtype()) {
    StridedToDense(sizeof(In), x.ndim(), x.raw()->shape, x.raw_data(),
                   x.raw()->strides, y.raw_data());
    return;
  }
  DispatchDType(y.dtype(), [&](auto tag) {
    using Out = decltype(tag);
    if (x.is_contiguous()) {
      CastLoop(x.data<const In>(), y.data<Out>(), n);
    } else {
      StridedCast<In, Out>(x, y.data<Out>());
    }
  });
}

DG_KERNEL_EX("Cast", "cpu", 0, DG_KERNEL_STRIDED_INPUTS, CastKernel, bool, uint8_t, int8_t, int16_t, int32_t,
          int64_t, Eigen::half, Eigen::bfloat16, float, double, uint16_t,
          uint32_t, uint64_t);

// BitCast: the bytes of x copied unchanged into y (a dtype of the same size,
// checked by the schema). A bool y is normalised to 0/1 so that every later
// kernel may assume it.
void BitCastKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const size_t bytes = static_cast<size_t>(x.numel()) * dg::DTypeSize(x.dtype());
  DG_CHECK(x.numel() == y.numel() &&
               dg::DTypeSize(x.dtype()) == dg::DTypeSize(y.dtype()),
           DG_INTERNAL, ctx.op_name(), ": ", x.numel(), " input and ",
           y.numel(), " output elements of different sizes");
  if (bytes == 0) return;
  if (y.dtype() == DG_BOOL) {
    const uint8_t* px = static_cast<const uint8_t*>(x.raw_data());
    bool* py = y.data<bool>();
    CastLoop(px, py, x.numel());
    return;
  }
  ParallelMemcpy(y.raw_data(), x.raw_data(), bytes);
}

DG_KERNEL_MASK("BitCast", "cpu", dg::kAny, 0, 0, BitCastKernel);

}  // namespace
}  // namespace cpu_eigen
