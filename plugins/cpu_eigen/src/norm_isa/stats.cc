// The per-instruction-set builds of BatchNorm's shifted sums (stats.h).
#include "stats.h"

#include <cstdint>

#ifndef DG_NORMSTATS_ISA
#error "build src/norm_isa/*.cc with -DDG_NORMSTATS_ISA=base|v3|v4 (see CMakeLists.txt)"
#endif

// The vector helpers below are internal and inlined: GCC's note that
// passing a 32/64-byte vector by value changes the ABI without AVX does
// not concern them (clang 16 has the same warning, and -Werror builds
// make it an error there too).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define DG_NORMSTATS_CAT_INNER_(a, b) a##b
#define DG_NORMSTATS_CAT_(a, b) DG_NORMSTATS_CAT_INNER_(a, b)

namespace cpu_eigen {
namespace DG_NORMSTATS_CAT_(normstats_, DG_NORMSTATS_ISA) {
namespace {

// GCC/Clang vector extensions: the accumulators are registers of 8 (or 4)
// doubles, which each build lowers to its own instructions (AVX-512, AVX2
// or SSE2 pairs); a scalar reduction would be one dependent chain (the
// compiler may not reorder floating-point sums).
typedef double D8 __attribute__((vector_size(64)));
typedef double D4 __attribute__((vector_size(32)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));

inline D8 Load8(const float* p) {
  F8 f;
  __builtin_memcpy(&f, p, sizeof(f));
  return __builtin_convertvector(f, D8);
}
inline D8 Load8(const double* p) {
  D8 d;
  __builtin_memcpy(&d, p, sizeof(d));
  return d;
}
inline D4 Load4(const float* p) {
  F4 f;
  __builtin_memcpy(&f, p, sizeof(f));
  return __builtin_convertvector(f, D4);
}
inline D4 Load4(const double* p) {
  D4 d;
  __builtin_memcpy(&d, p, sizeof(d));
  return d;
}

// The lanes of v summed as a tree (a fixed order).
inline double HSum(D8 v) {
  const D4 lo = {v[0], v[1], v[2], v[3]}, hi = {v[4], v[5], v[6], v[7]};
  const D4 s = lo + hi;
  return (s[0] + s[2]) + (s[1] + s[3]);
}
inline double HSum(D4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

// Per value: d = x - shift; a += d, q += d^2 (and, with dy, b += g,
// c += g d). Runs of 16 and 8 values go to two 8-lane accumulators, a run
// of 4 to a 4-lane one, the rest to scalars; all are added at the end in a
// fixed order.
template <typename T, bool kGrad>
void Accumulate(const T* x, const T* dy, int64_t nseg, int64_t stride,
                int64_t len, double shift, double* out) {
  const D8 s8 = D8{} + shift;
  const D4 s4 = D4{} + shift;
  D8 a0 = {}, a1 = {}, q0 = {}, q1 = {}, b0 = {}, b1 = {}, c0 = {}, c1 = {};
  D4 a4 = {}, q4 = {}, b4 = {}, c4 = {};
  double at = 0, qt = 0, bt = 0, ct = 0;
  for (int64_t k = 0; k < nseg; ++k) {
    const T* p = x + k * stride;
    const T* g = kGrad ? dy + k * stride : nullptr;
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
      const D8 d0 = Load8(p + i) - s8, d1 = Load8(p + i + 8) - s8;
      a0 += d0;
      a1 += d1;
      q0 += d0 * d0;
      q1 += d1 * d1;
      if constexpr (kGrad) {
        const D8 g0 = Load8(g + i), g1 = Load8(g + i + 8);
        b0 += g0;
        b1 += g1;
        c0 += g0 * d0;
        c1 += g1 * d1;
      }
    }
    if (i + 8 <= len) {
      const D8 d0 = Load8(p + i) - s8;
      a0 += d0;
      q0 += d0 * d0;
      if constexpr (kGrad) {
        const D8 g0 = Load8(g + i);
        b0 += g0;
        c0 += g0 * d0;
      }
      i += 8;
    }
    if (i + 4 <= len) {
      const D4 d = Load4(p + i) - s4;
      a4 += d;
      q4 += d * d;
      if constexpr (kGrad) {
        const D4 gv = Load4(g + i);
        b4 += gv;
        c4 += gv * d;
      }
      i += 4;
    }
    for (; i < len; ++i) {
      const double d = static_cast<double>(p[i]) - shift;
      at += d;
      qt += d * d;
      if constexpr (kGrad) {
        const double gv = static_cast<double>(g[i]);
        bt += gv;
        ct += gv * d;
      }
    }
  }
  out[0] = (HSum(a0 + a1) + HSum(a4)) + at;
  out[1] = (HSum(q0 + q1) + HSum(q4)) + qt;
  if constexpr (kGrad) {
    out[2] = (HSum(b0 + b1) + HSum(b4)) + bt;
    out[3] = (HSum(c0 + c1) + HSum(c4)) + ct;
  }
}

template <typename T>
void Sums(const T* base, int64_t nseg, int64_t stride, int64_t len,
          double shift, double* out) {
  Accumulate<T, false>(base, nullptr, nseg, stride, len, shift, out);
}

template <typename T>
void GradSums(const T* x, const T* dy, int64_t nseg, int64_t stride,
              int64_t len, double shift, double* out) {
  Accumulate<T, true>(x, dy, nseg, stride, len, shift, out);
}

}  // namespace

void ShiftedSums(const float* base, int64_t nseg, int64_t stride, int64_t len,
                 double shift, double* out) {
  Sums(base, nseg, stride, len, shift, out);
}
void ShiftedSums(const double* base, int64_t nseg, int64_t stride,
                 int64_t len, double shift, double* out) {
  Sums(base, nseg, stride, len, shift, out);
}
void ShiftedGradSums(const float* x, const float* dy, int64_t nseg,
                     int64_t stride, int64_t len, double shift, double* out) {
  GradSums(x, dy, nseg, stride, len, shift, out);
}
void ShiftedGradSums(const double* x, const double* dy, int64_t nseg,
                     int64_t stride, int64_t len, double shift, double* out) {
  GradSums(x, dy, nseg, stride, len, shift, out);
}

}  // namespace DG_NORMSTATS_CAT_(normstats_, DG_NORMSTATS_ISA)
}  // namespace cpu_eigen
