// The float exponential of the softmax kernels (softmax_isa.cc), written
// for a vector of floats (GCC vector extensions; softmax_isa.cc uses its
// build's register width: 4 lanes with SSE, 8 with AVX2, 16 with AVX-512)
// and, for reference, a scalar float.
//
// ExpNonPositive(d) = exp(min(d, 0)), branch-free, for any float d (NaN
// and +inf give 1, -inf gives 0; the softmax kernels handle non-finite
// slices before they look at these values):
//   * d is clamped to [-88, 0];
//   * d = n * ln2 + r with n = round(d / ln2) (round-to-nearest through the
//     1.5 * 2^23 shifter) and |r| <= ln2 / 2 (Cody-Waite: ln2 as a 9-bit
//     head, exact times n, plus a tail);
//   * exp(r) by its Taylor polynomial of degree 7 in Horner form (the
//     truncation error is below 1e-8 relative on |r| <= ln2 / 2), with
//     fused multiply-adds where the build has FMA (MulAdd);
//   * times 2^n built in the exponent bits: n in [-127, 0], and 2^-127 is
//     taken as +0, so results below 2^-126 * 0.7 (d < -87.68) are 0;
//     results in [2^-126 * 0.7, 2^-126) come out subnormal, rounded once.
// Error against the exact exponential, measured over every float in
// [-88, 0] (1.12e9 values), with FMA (x86-64-v3) and without (baseline):
// at most 0.94 ulp for a normal result (99.5% correctly rounded), less
// than 2^-126 in absolute for a result below 2^-126.
// tests/ops/test_softmax_fast.py::test_exp_ulp_bound rechecks every 7th of
// those floats against 1 ulp.
#pragma once

// Vectors pass by value between inline functions of one translation unit
// (internal linkage, no ABI crosses a library boundary): GCC's note that a
// 64-byte vector argument's ABI depends on AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstdint>
#include <cstring>

#if defined(__FMA__)
#include <immintrin.h>
#endif

namespace cpu_eigen {
namespace softmax_exp {

typedef float V16 __attribute__((vector_size(64)));

// The integer type of a float type's bits: int32_t for float, and for a
// vector of floats the vector its comparisons give (int32_t lanes).
template <typename F>
struct IntOf {
  using type = decltype(F{} < F{});
};
template <>
struct IntOf<float> {
  using type = int32_t;
};

// x in every lane of F (float or a vector of floats).
template <typename F>
inline F Splat(float x) {
  return F{} + x;
}
template <typename I>
inline I SplatI(int32_t x) {
  return I{} + x;
}

template <typename To, typename From>
inline To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// a * b + c: one fused multiply-add where the build has FMA (x86-64-v3 and
// up), the same single rounding for a scalar and every lane; two roundings
// in a build without (the baseline). So a build with FMA and one without
// may differ in the last bit; builds of one kind agree bit for bit.
inline float MulAdd(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
template <typename F>
inline F MulAdd(F a, F b, F c) {
#if defined(__FMA__)
  if constexpr (sizeof(F) == 32) {
    return reinterpret_cast<F>(_mm256_fmadd_ps(
        reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
        reinterpret_cast<__m256>(c)));
  }
#if defined(__AVX512F__)
  if constexpr (sizeof(F) == 64) {
    return reinterpret_cast<F>(_mm512_fmadd_ps(
        reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b),
        reinterpret_cast<__m512>(c)));
  }
#endif
  if constexpr (sizeof(F) == 16) {
    return reinterpret_cast<F>(_mm_fmadd_ps(reinterpret_cast<__m128>(a),
                                            reinterpret_cast<__m128>(b),
                                            reinterpret_cast<__m128>(c)));
  }
#endif
  return a * b + c;
}

// exp(min(d, 0)) per lane; see the top of this file.
// kNonPositive: the caller guarantees d <= 0 or -inf (no NaN, nothing
// positive), and the upper clamp is left out.
template <typename F, bool kNonPositive = false>
inline F ExpNonPositive(F d) {
  using I = typename IntOf<F>::type;
  if constexpr (!kNonPositive) {
    const F zero = Splat<F>(0.0f);
    d = d < zero ? d : zero;  // NaN and positive values -> 0
  }
  const F lo = Splat<F>(-88.0f);
  d = d > lo ? d : lo;  // -inf and below -> -88
  // n = round(d / ln2) through the shifter 1.5 * 2^23 (|d / ln2| < 2^22);
  // n >= -127 as d >= -88.
  const F shifter = Splat<F>(12582912.0f);
  const F t = MulAdd(d, Splat<F>(1.44269504088896341f), shifter);
  const F n = t - shifter;
  // r = d - n * ln2: the head 0.693359375 (9 bits) times n is exact and
  // close to d; the tail is ln2 - head.
  const F r = MulAdd(n, Splat<F>(2.12194440054690583e-4f),
                     MulAdd(n, Splat<F>(-0.693359375f), d));
  F p = Splat<F>(1.0f / 5040.0f);
  p = MulAdd(p, r, Splat<F>(1.0f / 720.0f));
  p = MulAdd(p, r, Splat<F>(1.0f / 120.0f));
  p = MulAdd(p, r, Splat<F>(1.0f / 24.0f));
  p = MulAdd(p, r, Splat<F>(1.0f / 6.0f));
  p = MulAdd(p, r, Splat<F>(0.5f));
  p = MulAdd(p, r, Splat<F>(1.0f));
  p = MulAdd(p, r, Splat<F>(1.0f));
  // 2^n from the exponent bits n + 127 (the shifter's bits are
  // 0x4B400000 + n): 2^-126 .. 1, and +0 for n = -127.
  const I e = BitCast<I>(t) - SplatI<I>(0x4B400000 - 127);
  return p * BitCast<F>(I(e << 23));
}

}  // namespace softmax_exp
}  // namespace cpu_eigen
