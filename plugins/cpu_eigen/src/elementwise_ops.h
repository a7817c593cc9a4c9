// Element-wise op definitions shared by the kernels (unary.cc, binary.cc)
// and by elementwise_isa.cc, which is built once per instruction set.
//
// Each op is a small functor with
//
//   - a scalar form, `T operator()(T x)` or `T operator()(T a, T b)`, which
//     defines the op's meaning and serves integer dtypes; and
//   - for floating dtypes, either `kEigen = true` plus `Array(x)` /
//     `Array(a, b)` returning an Eigen array expression, or `Run(x, y, n)`,
//     which handles a contiguous run itself.
//
// Eigen evaluates an expression over a run with packets, except for an
// unaligned head and the tail, which take its scalar path. Only ops whose
// result is exact (correctly rounded in both paths: arithmetic, min/max,
// rounding) use Array forms; the others (exp, log, tanh, ...) use Run with
// RunPackets / RunWithFixup below, so that an element's result never
// depends on its position in the tensor.
//
// Several builds of this header live in one shared object (see
// elementwise_isa.cc). Code with one mangled name in two builds would be
// merged by the linker, which could then run AVX-512 code on a CPU without
// it. So everything here sits in a namespace named after the build
// (CPU_EIGEN_EW_NS: ew_base, ew_v3, ew_v4), builds other than the baseline
// rename Eigen's namespace before including it, and this header uses
// nothing that instantiates shared code (no dragon/plugin.hpp, no std
// containers, strings or algorithms; <cmath> functions are builtins).
#ifndef DRAGON_CPU_EIGEN_ELEMENTWISE_OPS_H_
#define DRAGON_CPU_EIGEN_ELEMENTWISE_OPS_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "dragon/elementwise.h"

#define CPU_EIGEN_EW_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_EW_CAT_(a, b) CPU_EIGEN_EW_CAT_INNER_(a, b)
#ifdef CPU_EIGEN_EW_ISA
#define CPU_EIGEN_EW_NS CPU_EIGEN_EW_CAT_(ew_, CPU_EIGEN_EW_ISA)
#else
#define CPU_EIGEN_EW_NS ew_base
#endif

namespace cpu_eigen {

// ------------------------------------------- the per-build table (plain)

// The kinds, one per row of the element-wise op table (dragon/elementwise.h),
// in its order: UnaryKind::k<Kind> runs functor <Kind>Op<T> below,
// BinaryKind::k<Kind> functor <Kind>Op (kSquareA: a², for pow(a, 2)).
#define CPU_EIGEN_EW_KIND_U_(Kind, Opcode, OpType, Attr, Kernel, Cost) k##Kind,
#define CPU_EIGEN_EW_KIND_B_(Kind, Opcode, OpType, Cost) k##Kind,
enum class UnaryKind : int32_t { DG_ELEMENTWISE_UNARY(CPU_EIGEN_EW_KIND_U_) };
enum class BinaryKind : int32_t { DG_ELEMENTWISE_BINARY(CPU_EIGEN_EW_KIND_B_) };
#undef CPU_EIGEN_EW_KIND_U_
#undef CPU_EIGEN_EW_KIND_B_

// Which operand of a binary run is one element repeated: neither (kVV),
// a (kSV) or b (kVS).
enum class BinaryForm : int32_t { kVV, kSV, kVS };

// Attribute values of a unary op: LeakyRelu/Elu alpha in p0; Softplus beta
// and threshold in p0, p1; Clip bounds in p0, p1.
template <typename T>
struct UnaryParams {
  T p0, p1;
};

// Contiguous runs of the float ops, compiled for one instruction set.
template <typename T>
struct FloatKernels {
  void (*unary)(UnaryKind kind, UnaryParams<T> params, const T* x, T* y,
                int64_t n);
  void (*binary)(BinaryKind kind, BinaryForm form, const T* a, const T* b,
                 T* y, int64_t n);
  const char* isa;  // e.g. "x86-64-v3"
  // dx = dy * gelu'(x), exact (tanh = false) or tanh form (gelu_grad.h).
  void (*gelu_grad)(bool tanh, const T* x, const T* dy, T* dx, int64_t n);
  // BiasGelu's exact form in one pass (fused_act.cc, gelu_grad.h): pre =
  // x + bias, y = gelu(pre) over n elements. Null for double.
  void (*bias_gelu)(const T* x, const T* bias, T* pre, T* y, int64_t n);
  // BiasGeluGrad's exact form in one pass over rows <= 4 rows of cols
  // elements (row stride ld): g = dy gelu'(pre), and acc[k] += the rows'
  // column sum as rows.h's ColumnSum adds it. Null for double.
  void (*gelu_slope_rows)(const T* pre, const T* dy, T* g, int64_t ld,
                          int64_t rows, int64_t cols, double* acc);
};

namespace CPU_EIGEN_EW_NS {

template <typename T>
using ArrayX = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrayMap = Eigen::Map<ArrayX<T>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const ArrayX<T>>;

// ------------------------------------------------- wrapping integer math

// Integer arithmetic that wraps (two's complement) instead of overflowing,
// which is undefined behaviour for signed types in C++. Computed in an
// unsigned type at least as wide as `unsigned` so that narrow types do not
// promote to (signed) int first. For floating types, the plain operators.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                       std::make_unsigned_t<T>>;

template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) +
                          static_cast<WrapType<T>>(b));
  } else {
    return a + b;
  }
}

template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) -
                          static_cast<WrapType<T>>(b));
  } else {
    return a - b;
  }
}

template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<WrapType<T>>(a) *
                          static_cast<WrapType<T>>(b));
  } else {
    return a * b;
  }
}

template <typename T>
inline T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(WrapType<T>{0} - static_cast<WrapType<T>>(a));
  } else {
    return -a;
  }
}

// NaN test that is false (and free) for integer types.
template <typename T>
inline bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    (void)x;
    return false;
  }
}

// ----------------------------------------------------------- unary ops

template <typename T>
struct NegOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return WrapNeg(x); }
  template <typename X>
  auto Array(const X& x) const { return -x; }
};

template <typename T>
struct AbsOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fabs(x);
    } else if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < 0 ? WrapNeg(x) : x;  // the most negative value stays put
    }
  }
  template <typename X>
  auto Array(const X& x) const { return x.abs(); }
};

// -1, 0 or 1; NaN stays NaN and -0.0 gives +0.0 (as NumPy).
template <typename T>
struct SignOp {
  T operator()(T x) const {
    if (IsNan(x)) return x;
    return static_cast<T>(static_cast<int>(x > T(0)) -
                          static_cast<int>(x < T(0)));
  }
};

template <typename T>
struct SquareOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return WrapMul(x, x); }
  template <typename X>
  auto Array(const X& x) const { return x.square(); }
};

template <typename T>
struct ReciprocalOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return T(1) / x; }
  template <typename X>
  auto Array(const X& x) const { return x.inverse(); }
};

// IEEE square roots (kReciprocal: 1/√x, both steps correctly rounded) of
// a contiguous run, with the widest vectors this build has. Not Eigen's:
// under its default EIGEN_FAST_MATH its SSE float and AVX-512 float/double
// sqrt are a hardware estimate plus a Newton step (NaN for +inf, +0 for
// -0, an ulp off elsewhere).
template <bool kReciprocal, typename T>
void SqrtRun(const T* x, T* y, int64_t n) {
  static_assert(std::is_floating_point_v<T>, "float or double");
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 16 <= n; i += 16) {
      __m512 r = _mm512_sqrt_ps(_mm512_loadu_ps(x + i));
      if constexpr (kReciprocal) r = _mm512_div_ps(_mm512_set1_ps(1.0f), r);
      _mm512_storeu_ps(y + i, r);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      __m512d r = _mm512_sqrt_pd(_mm512_loadu_pd(x + i));
      if constexpr (kReciprocal) r = _mm512_div_pd(_mm512_set1_pd(1.0), r);
      _mm512_storeu_pd(y + i, r);
    }
  }
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= n; i += 8) {
      __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
      if constexpr (kReciprocal) r = _mm256_div_ps(_mm256_set1_ps(1.0f), r);
      _mm256_storeu_ps(y + i, r);
    }
  } else {
    for (; i + 4 <= n; i += 4) {
      __m256d r = _mm256_sqrt_pd(_mm256_loadu_pd(x + i));
      if constexpr (kReciprocal) r = _mm256_div_pd(_mm256_set1_pd(1.0), r);
      _mm256_storeu_pd(y + i, r);
    }
  }
#elif defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= n; i += 4) {
      __m128 r = _mm_sqrt_ps(_mm_loadu_ps(x + i));
      if constexpr (kReciprocal) r = _mm_div_ps(_mm_set1_ps(1.0f), r);
      _mm_storeu_ps(y + i, r);
    }
  } else {
    for (; i + 2 <= n; i += 2) {
      __m128d r = _mm_sqrt_pd(_mm_loadu_pd(x + i));
      if constexpr (kReciprocal) r = _mm_div_pd(_mm_set1_pd(1.0), r);
      _mm_storeu_pd(y + i, r);
    }
  }
#endif
  for (; i < n; ++i) {
    y[i] = kReciprocal ? T(1) / std::sqrt(x[i]) : std::sqrt(x[i]);
  }
}

template <typename T>
struct SqrtOp {
  T operator()(T x) const { return std::sqrt(x); }
  void Run(const T* x, T* y, int64_t n) const { SqrtRun<false>(x, y, n); }
};

template <typename T>
struct RsqrtOp {
  T operator()(T x) const { return T(1) / std::sqrt(x); }
  void Run(const T* x, T* y, int64_t n) const { SqrtRun<true>(x, y, n); }
};

// ------------------------------------------- packet-only evaluation
//
// Eigen evaluates the unaligned head and the tail of a run with scalar
// libm calls, which round differently from its packet math: an element's
// result would depend on its position (in place or not, which thread's
// chunk). So the inexact ops below run on blocks copied into aligned
// buffers padded to whole packets, where every element takes the packet
// path, and then fix up the arguments where that path is inaccurate.

constexpr int64_t kBlock = 512;  // elements per block

// Elements per packet of this build (4 floats for SSE, 16 for AVX-512).
template <typename T>
constexpr int64_t kPacket = Eigen::internal::packet_traits<T>::size;

template <typename T>
using AlignedMap = Eigen::Map<ArrayX<T>, Eigen::Aligned64>;
template <typename T>
using ConstAlignedMap = Eigen::Map<const ArrayX<T>, Eigen::Aligned64>;

// Calls body(in, out, m, padded) per block of x: `in` holds the block's m
// elements then zeros up to `padded` (whole packets), both buffers 64-byte
// aligned; out[0, m) is then copied to y. x may be y.
template <typename T, typename Body>
void ForEachPaddedBlock(const T* x, T* y, int64_t n, const Body& body) {
  alignas(64) T in[kBlock];
  alignas(64) T out[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    // Plain loops rather than std::copy and friends: see the note on
    // shared code at the top.
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    const int64_t padded = (m + kPacket<T> - 1) / kPacket<T> * kPacket<T>;
    for (int64_t j = 0; j < m; ++j) in[j] = x[b + j];
    for (int64_t j = m; j < padded; ++j) in[j] = T(0);
    body(static_cast<const T*>(in), static_cast<T*>(out), m, padded);
    for (int64_t j = 0; j < m; ++j) y[b + j] = out[j];
  }
}

// Number of x[i] (i < n) outside [lo, hi]; NaN is not counted. Written so
// that it vectorises (Eigen's min/max reductions are several times slower).
template <typename T>
inline int64_t CountOutside(const T* x, int64_t n, T lo, T hi) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += (x[i] < lo) | (x[i] > hi);
  return count;
}

// y = vec(x) over a contiguous run (vec maps an Eigen array to an
// expression), packets only; then y[i] = scalar(x[i]) where x[i] < lo or
// x[i] > hi: the arguments for which the packet form is inaccurate.
template <typename T, typename Vec, typename Scalar>
void RunWithFixup(const T* x, T* y, int64_t n, T lo, T hi, const Vec& vec,
                  const Scalar& scalar) {
  ForEachPaddedBlock(x, y, n, [&](const T* in, T* out, int64_t m,
                                  int64_t padded) {
    AlignedMap<T>(out, padded) = vec(ConstAlignedMap<T>(in, padded));
    if (CountOutside(in, m, lo, hi) != 0) {
      for (int64_t j = 0; j < m; ++j) {
        if (in[j] < lo || in[j] > hi) out[j] = scalar(in[j]);
      }
    }
  });
}

// y = vec(x), packets only.
template <typename T, typename Vec>
void RunPackets(const T* x, T* y, int64_t n, const Vec& vec) {
  ForEachPaddedBlock(x, y, n, [&](const T* in, T* out, int64_t,
                                  int64_t padded) {
    AlignedMap<T>(out, padded) = vec(ConstAlignedMap<T>(in, padded));
  });
}

// Where Eigen's vectorised exp is accurate. Outside, it clamps its argument
// (exp(-1000) = 2.9e-39 for float, 5.6e-309 for double, where the answer
// is 0, and subnormal results are lost), and its AVX-512 float version
// overflows from 88.38 on instead of 88.72.
template <typename T>
struct ExpRange {
  static constexpr T kLo = std::is_same_v<T, float> ? T(-87) : T(-708);
  static constexpr T kHi = std::is_same_v<T, float> ? T(88) : T(709);
};

template <typename T>
struct ExpOp {
  T operator()(T x) const { return std::exp(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunWithFixup(
        x, y, n, ExpRange<T>::kLo, ExpRange<T>::kHi,
        [](const auto& v) { return v.exp(); }, *this);
  }
};

// Eigen's vectorised log treats subnormal arguments as the smallest normal
// number (log(1e-40f) = -87.3 instead of -92.1): libm serves those, and
// with them zero, negatives and -inf.
template <typename T>
struct LogOp {
  T operator()(T x) const { return std::log(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunWithFixup(
        x, y, n, std::numeric_limits<T>::min(),
        std::numeric_limits<T>::infinity(),
        [](const auto& v) { return v.log(); }, *this);
  }
};

template <typename T>
struct Log1pOp {
  T operator()(T x) const { return std::log1p(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunPackets(x, y, n, [](const auto& v) { return v.log1p(); });
  }
};

template <typename T>
struct SinOp {
  T operator()(T x) const { return std::sin(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunPackets(x, y, n, [](const auto& v) { return v.sin(); });
  }
};

template <typename T>
struct CosOp {
  T operator()(T x) const { return std::cos(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunPackets(x, y, n, [](const auto& v) { return v.cos(); });
  }
};

// Eigen's float tanh is a rational approximation good to a few ulp.
template <typename T>
struct TanhOp {
  T operator()(T x) const { return std::tanh(x); }
  void Run(const T* x, T* y, int64_t n) const {
    RunPackets(x, y, n, [](const auto& v) { return v.tanh(); });
  }
};

// 1 / (1 + e^-x), which never amplifies e^-x's error. Below
// -ExpRange::kHi, where e^-x overflows and the result is subnormal (or 0),
// it is e^x / (1 + e^x) instead.
template <typename T>
struct SigmoidOp {
  T operator()(T x) const {
    if (x < T(0)) {
      const T e = std::exp(x);
      return e / (T(1) + e);
    }
    return T(1) / (T(1) + std::exp(-x));
  }
  void Run(const T* x, T* y, int64_t n) const {
    RunWithFixup(
        x, y, n, -ExpRange<T>::kHi, std::numeric_limits<T>::infinity(),
        [](const auto& v) { return (T(1) + (-v).exp()).inverse(); }, *this);
  }
};

// Eigen's packet max(a, b) and min(a, b) return a when a == b (as
// std::max); NumPy's maximum and minimum return b, which decides the sign
// of zero. The forms below follow NumPy: Eigen's arguments are swapped.

// NumPy's maximum(x, 0): NaN propagates, relu(-0) = +0.
template <typename T>
struct ReluOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return x > T(0) || IsNan(x) ? x : T(0); }
  template <typename X>
  auto Array(const X& x) const {
    return ArrayX<T>::Constant(x.size(), T(0))
        .template max<Eigen::PropagateNaN>(x);
  }
};

// x if x > 0 else αx, as max(x, 0) + α·min(x, 0): the same values, and
// vectorised (Eigen 3.4 evaluates select() one scalar at a time).
template <typename T>
struct LeakyReluOp {
  static constexpr bool kEigen = true;
  T alpha;
  T operator()(T x) const { return x > T(0) ? x : alpha * x; }
  template <typename X>
  auto Array(const X& x) const {
    return x.template max<Eigen::PropagateNaN>(T(0)) + alpha * x.min(T(0));
  }
};

// x if x > 0 else α(e^x − 1), as max(x, 0) + α·expm1(min(x, 0)).
template <typename T>
struct EluOp {
  T alpha;
  T operator()(T x) const { return x > T(0) ? x : alpha * std::expm1(x); }
  void Run(const T* x, T* y, int64_t n) const {
    const T a = alpha;
    RunPackets(x, y, n, [a](const auto& v) {
      return v.template max<Eigen::PropagateNaN>(T(0)) +
             a * v.min(T(0)).expm1();
    });
  }
};

// ------------------------------------------------------------------- GELU
//
// gelu(x) = x Phi(x) (exact form; Phi the standard normal CDF) and its
// slope gelu'(x) = Phi(x) + x phi(x) (GeluGrad, gelu_grad.h) share one
// branch-free float packet formula, gelu::ErfPackets (issue 21: the
// forward had a double tail for x < -1, 6x slower than torch's, and was
// served by oneDNN instead):
//
//   a = min(|x|, 40), z = a / sqrt 2, t = 1 / (1 + p z), p = 0.38,
//   E = e^(-a^2/2), q = Phi(-a) = erfc(z) / 2 = E t P(t),
//   Phi(x) = q for x <= 0 and 1 - q for x > 0 (no cancellation either way);
//   with H = [x > 0]:
//   gelu(x)  = x H - a q      (x < 0: x q; x > 0: x - x q),
//   gelu'(x) = H + E (t P(t) (1 - 2H) + c / sqrt(2 pi)),  c = x in [-40, 40].
//
// P (kErfcP32) has degree 8: erfc(z) e^(z^2) / (2 t) fitted by weighted
// least squares in relative error on Chebyshev nodes of t over z in
// [0, 13.3] (beyond, E underflows: t P(t) stays finite and q is 0) against
// scipy's erfcx, then each coefficient rounded to float in turn with the
// later ones refitted; p (among 0.22 to 0.5) minimised the error:
// relative error below 2.2e-8 (0.4 float ulp).
//
// E carries the result's relative accuracy for x < 0, and e^(-a^2/2) with
// a^2 rounded would lose a^2/2 ulp (50 at x = -10): so a^2 = s + r exactly
// (s = a^2 rounded, r its rounding error, from one fused multiply-add, or
// Dekker's split where the build has no FMA) and the exp takes its
// argument as that unrounded sum (ExpSplit16, ExpSplit). AVX-512 builds
// compute E = e^(-s/2 - r/2) in one factor (scalef rounds a subnormal E
// once and gives 0 below); the others E = e^2, e = e^(-s/4 - r/4) clamped
// at e^-86 (normal; E t P is then below every float), applied last so that
// every intermediate stays normal as long as the result does.
// H is a packet compare ANDed with 1.0f's bits (exactly 0 or 1; x = -0
// gives -0 * 0 + -0 = -0). NaN propagates through every step (Eigen's
// pmin / pmax return their first argument when either is NaN, like
// std::min / std::max), so a NaN x gives NaN. x = inf gives inf / dy,
// -inf gives -0 / 0.
namespace gelu {

constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
inline constexpr float kErfcP32[9] = {
    0.107205719f,  0.106956534f, 0.101969421f,  0.069284007f, 0.115062244f,
    -0.0807409286f, 0.181892991f, -0.131101549f, 0.0294715706f};
// p / sqrt 2: t = 1 / (1 + kErfcT a) (the fit used this float's value).
inline constexpr float kErfcT = 0.26870057f;

// y 2^k for k a whole number (as a float) with y 2^k normal: AVX-512's
// scalef; SSE / AVX2 add k to the exponent bits (k sits in the low bits
// of kbits, the float k + 1.5 * 2^23, whose upper bits the shift drops).
#if defined(__AVX512F__)
inline __m512 ScalePow2(__m512 y, __m512 k, __m512) {
  return _mm512_scalef_ps(y, k);
}
#endif
#if defined(__AVX2__)
inline __m256 ScalePow2(__m256 y, __m256, __m256 kbits) {
  return _mm256_castsi256_ps(_mm256_add_epi32(
      _mm256_castps_si256(y),
      _mm256_slli_epi32(_mm256_castps_si256(kbits), 23)));
}
#endif
#if defined(__SSE2__)
inline __m128 ScalePow2(__m128 y, __m128, __m128 kbits) {
  return _mm_castsi128_ps(_mm_add_epi32(
      _mm_castps_si128(y), _mm_slli_epi32(_mm_castps_si128(kbits), 23)));
}
#endif
template <typename Packet>
inline Packet ScalePow2(Packet y, Packet k, Packet) {
  return Eigen::internal::pldexp(y, k);
}

// out[u] = e^(hi + lo), hi = scale s[u], lo = scale r[u], for kU packets,
// hi <= 0 (clamped at -86, so the result is normal), |lo| <= 2^-24 |hi|
// (scale a power of 2, so both products are exact): k = round(hi / ln 2),
// x = hi - k ln 2 (two-part ln 2, exact first product) + lo, e^x by
// Cephes' expf polynomial on |x| <= ln(2)/2 (about 1 ulp), times 2^k.
template <int kU, typename Packet>
inline void ExpSplit(const Packet* s, const Packet* r, Packet scale,
                     Packet* out) {
  namespace ei = Eigen::internal;
  const Packet round = ei::pset1<Packet>(12582912.0f);  // 1.5 * 2^23
  Packet k[kU], kbits[kU], x[kU], y[kU];
  for (int u = 0; u < kU; ++u) {
    const Packet h = ei::pmax(ei::pmul(s[u], scale), ei::pset1<Packet>(-86.0f));
    kbits[u] = ei::pmadd(h, ei::pset1<Packet>(1.44269504088896341f), round);
    k[u] = ei::psub(kbits[u], round);
    x[u] = ei::pmadd(k[u], ei::pset1<Packet>(-0.693359375f), h);
    x[u] = ei::pmadd(k[u], ei::pset1<Packet>(2.12194440e-4f), x[u]);
    x[u] = ei::pmadd(r[u], scale, x[u]);
    y[u] = ei::pset1<Packet>(1.9875691500e-4f);
  }
  constexpr float kC[5] = {1.3981999507e-3f, 8.3334519073e-3f,
                           4.1665795894e-2f, 1.6666665459e-1f,
                           5.0000001201e-1f};
  for (float c : kC) {
    const Packet cp = ei::pset1<Packet>(c);
    for (int u = 0; u < kU; ++u) y[u] = ei::pmadd(y[u], x[u], cp);
  }
  for (int u = 0; u < kU; ++u) {
    y[u] = ei::padd(ei::pmadd(y[u], ei::pmul(x[u], x[u]), x[u]),
                    ei::pset1<Packet>(1.0f));
    out[u] = ScalePow2(y[u], k[u], kbits[u]);
  }
}

#if defined(__AVX512F__)
// e^(hi + lo), |lo| <= 2^-24 |hi|, any hi <= 0, for AVX-512: k =
// round(16 hi / ln 2), x = hi - (k/16) ln 2 (two-part ln 2: the first
// product is exact wherever the result is not 0) + lo, |x| <= ln(2)/32,
// e^x = 1 + x + x^2/2 + x^3/6 (truncation below 9.3e-9 relative), times
// 2^(k mod 16 / 16) from a 16-entry table (one permute), scaled by
// 2^floor(k/16) with scalef, which also rounds subnormal results once
// and gives 0 below them.
inline __m512 ExpSplit16(__m512 hi, __m512 lo) {
  alignas(64) static constexpr float kPow2Sixteenths[16] = {
      1.0f,         1.04427378f, 1.09050773f, 1.13878863f,
      1.18920712f,  1.24185781f, 1.29683955f, 1.35425555f,
      1.41421356f,  1.47682615f, 1.54221083f, 1.61049033f,
      1.68179283f,  1.75625216f, 1.83400809f, 1.91520656f};
  // kq = k / 16 = hi / ln 2 rounded to a sixteenth: added to 1.5 * 2^19,
  // whose spacing is 1/16, so k mod 16 sits in the low 4 bits of kbits.
  const __m512 round = _mm512_set1_ps(786432.0f);  // 1.5 * 2^19
  const __m512 kbits =
      _mm512_fmadd_ps(hi, _mm512_set1_ps(1.44269504088896341f), round);
  const __m512 kq = _mm512_sub_ps(kbits, round);
  __m512 x = _mm512_fmadd_ps(kq, _mm512_set1_ps(-0.693359375f), hi);
  x = _mm512_fmadd_ps(kq, _mm512_set1_ps(2.12194440e-4f), x);
  x = _mm512_add_ps(x, lo);
  __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 6), x,
                             _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
  const __m512 table = _mm512_load_ps(kPow2Sixteenths);
  y = _mm512_mul_ps(
      y, _mm512_permutexvar_ps(_mm512_castps_si512(kbits), table));
  return _mm512_scalef_ps(y, kq);  // 2^floor(k/16)
}
#endif

// m E: E is e (AVX-512: E itself) or e^2 (the other builds: the two
// factors keep each intermediate normal as long as the product is).
template <typename Packet>
inline Packet ScaleByE(Packet m, Packet e) {
#if defined(__AVX512F__)
  return Eigen::internal::pmul(m, e);
#else
  return Eigen::internal::pmul(Eigen::internal::pmul(m, e), e);
#endif
}

// m + y where x >= 0, m elsewhere (H = [x >= 0]: the exact forms agree at
// x = 0 either way; a NaN x compares false). AVX-512: one masked add;
// otherwise m + H y with H a compare ANDed with 1.0f's bits (0 or 1).
// NegateWhereNonNegative: -y where x >= 0, y elsewhere.
#if defined(__AVX512F__)
inline __m512 AddWhereNonNegative(__m512 x, __m512 m, __m512 y) {
  const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_add_ps(m, k, m, y);
}
inline __m512 NegateWhereNonNegative(__m512 x, __m512 y) {
  const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_sub_ps(y, k, _mm512_setzero_ps(), y);
}
#endif
template <typename Packet>
inline Packet AddWhereNonNegative(Packet x, Packet m, Packet y) {
  namespace ei = Eigen::internal;
  const Packet one = ei::pset1<Packet>(1.0f);
  return ei::pmadd(y, ei::pand(ei::pcmp_le(ei::pzero(x), x), one), m);
}
template <typename Packet>
inline Packet NegateWhereNonNegative(Packet x, Packet y) {
  namespace ei = Eigen::internal;
  const Packet h = ei::pand(ei::pcmp_le(ei::pzero(x), x), ei::pset1<Packet>(1.0f));
  return ei::pmul(y, ei::pmadd(h, ei::pset1<Packet>(-2.0f), ei::pset1<Packet>(1.0f)));
}

// What ErfPackets writes: gelu(x), or dy gelu'(x).
enum class ErfOut { kGelu, kSlope };

// res[u] = gelu(xv[u]) (kGelu; dyv unused) or dyv[u] gelu'(xv[u]) (kSlope)
// for kU independent packets: the formula is a long dependent chain
// (division, two polynomials), and interleaving packets keeps the FMA units
// busy where out-of-order execution alone does not look far enough ahead.
// A result depends on its own element only (the same bits for any kU).
template <ErfOut kOut, int kU, typename Packet>
inline void ErfCore(const Packet* xv, const Packet* dyv, Packet* res) {
  namespace ei = Eigen::internal;
  // gelu evaluates -P (negated coefficients: exactly -P), so that -a q
  // needs no negation.
  constexpr float kSign = kOut == ErfOut::kGelu ? -1.0f : 1.0f;
  const Packet lo = ei::pset1<Packet>(-40.0f), hi = ei::pset1<Packet>(40.0f);
  const Packet one = ei::pset1<Packet>(1.0f);
  const Packet k_t = ei::pset1<Packet>(kErfcT);
  const Packet k_pdf = ei::pset1<Packet>(static_cast<float>(kInvSqrt2Pi));
#if defined(__AVX512F__)
  const Packet k_exp = ei::pset1<Packet>(-0.5f);  // E = e^(-a^2/2)
#else
  const Packet k_exp = ei::pset1<Packet>(-0.25f);  // e = e^(-a^2/4)
#endif
#if !defined(__FMA__)
  const Packet k_split = ei::pset1<Packet>(4097.0f);  // 2^12 + 1
#endif
  Packet a[kU], t[kU], w[kU], p[kU], e[kU];
#if !defined(__AVX512F__)
  Packet s[kU], r[kU];
#endif
  for (int u = 0; u < kU; ++u) {
    a[u] = ei::pmin(ei::pabs(xv[u]), hi);
    if constexpr (kOut == ErfOut::kGelu) {
      // w = a t in the division, t = 1 - kErfcT w (1 - t = kErfcT a t).
      w[u] = ei::pdiv(a[u], ei::pmadd(a[u], k_t, one));
      t[u] = ei::pmadd(w[u], ei::pnegate(k_t), one);
    } else {
      t[u] = ei::pdiv(one, ei::pmadd(a[u], k_t, one));
    }
    p[u] = ei::pset1<Packet>(kSign * kErfcP32[8]);
  }
  for (int i = 7; i >= 0; --i) {
    const Packet ci = ei::pset1<Packet>(kSign * kErfcP32[i]);
    for (int u = 0; u < kU; ++u) p[u] = ei::pmadd(p[u], t[u], ci);
  }
#if defined(__AVX512F__)
  // E = e^(hi + lo) in one factor (scalef rounds a subnormal E once),
  // -a^2/2 = hi + lo exactly: hi = (-a/2) a rounded, lo its error (FMA).
  for (int u = 0; u < kU; ++u) {
    const Packet na = ei::pmul(a[u], k_exp);
    const Packet h = ei::pmul(na, a[u]);
    e[u] = ExpSplit16(h, ei::pmadd(na, a[u], ei::pnegate(h)));
  }
#else
  for (int u = 0; u < kU; ++u) {
    // a^2 = s + r exactly.
    s[u] = ei::pmul(a[u], a[u]);
#if defined(__FMA__)
    r[u] = ei::pmadd(a[u], a[u], ei::pnegate(s[u]));
#else
    // Dekker: a = ah + al with ah of 12 significant bits (a <= 40, so
    // 4097 a cannot overflow), every product of the halves exact.
    const Packet g = ei::pmul(a[u], k_split);
    const Packet ah = ei::psub(g, ei::psub(g, a[u]));
    const Packet al = ei::psub(a[u], ah);
    r[u] = ei::padd(ei::padd(ei::psub(ei::pmul(ah, ah), s[u]),
                             ei::pmul(ei::padd(ah, ah), al)),
                    ei::pmul(al, al));
#endif
  }
  ExpSplit<kU>(s, r, k_exp, e);
#endif
  for (int u = 0; u < kU; ++u) {
    const Packet xc = ei::pmax(xv[u], lo);
    if constexpr (kOut == ErfOut::kGelu) {
      // x H - a q = (w (-P)) E + (x where x >= 0); at x = 0 both terms
      // are 0 and the sum keeps x's sign (x = +0: -0 + 0; -0: -0 + -0).
      const Packet m = ScaleByE(ei::pmul(w[u], p[u]), e[u]);
      res[u] = AddWhereNonNegative(xv[u], m, xc);
    } else {
      const Packet tp = ei::pmul(t[u], p[u]);
      // H + E (c / sqrt(2 pi) + t P (1 - 2H)).
      const Packet c = ei::pmin(xc, hi);
      const Packet k = ei::pmadd(c, k_pdf, NegateWhereNonNegative(xv[u], tp));
      res[u] = ei::pmul(dyv[u],
                        AddWhereNonNegative(xv[u], ScaleByE(k, e[u]), one));
    }
  }
}

// out[0, n) = gelu(x) (kGelu; dy unused) or dy gelu'(x) (kSlope) over n
// elements, a whole number of packets; loads and stores aligned or not (the
// values are the same either way).
template <ErfOut kOut, bool kAligned>
void ErfPackets(const float* x, const float* dy, float* out, int64_t n) {
  namespace ei = Eigen::internal;
  constexpr int kAlign = kAligned ? Eigen::Aligned64 : Eigen::Unaligned;
  using Packet = typename ei::packet_traits<float>::type;
  constexpr int64_t kP = kPacket<float>;
  // One packet (the n % (kU kP) rest) or kU packets at a time.
  auto run = [&](int64_t j, auto unroll) {
    constexpr int kU = decltype(unroll)::value;
    Packet xv[kU], dv[kU], res[kU];
    for (int u = 0; u < kU; ++u) {
      xv[u] = ei::ploadt<Packet, kAlign>(x + j + u * kP);
      if constexpr (kOut == ErfOut::kSlope) {
        dv[u] = ei::ploadt<Packet, kAlign>(dy + j + u * kP);
      }
    }
    ErfCore<kOut, kU>(xv, dv, res);
    for (int u = 0; u < kU; ++u) {
      ei::pstoret<float, Packet, kAlign>(out + j + u * kP, res[u]);
    }
  };
  constexpr int kUnroll = 2;
  int64_t j = 0;
  for (; j + kUnroll * kP <= n; j += kUnroll * kP) {
    run(j, std::integral_constant<int, kUnroll>{});
  }
  for (; j < n; j += kP) run(j, std::integral_constant<int, 1>{});
}

// BiasGelu's one pass (fused_act.cc): pre[0, n) = x + bias (one float add
// per element, as Add) and y[0, n) = gelu(pre), exact form, over n
// elements, a whole number of packets, unaligned. The loads of x stream in
// while the compute-bound gelu of the packets before runs, where a
// separate add pass over a block waited on them.
inline void BiasGeluPackets(const float* x, const float* bias, float* pre,
                            float* y, int64_t n) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<float>::type;
  constexpr int64_t kP = kPacket<float>;
  auto run = [&](int64_t j, auto unroll) {
    constexpr int kU = decltype(unroll)::value;
    Packet xv[kU], res[kU];
    for (int u = 0; u < kU; ++u) {
      xv[u] = ei::padd(ei::ploadu<Packet>(x + j + u * kP),
                       ei::ploadu<Packet>(bias + j + u * kP));
      ei::pstoreu(pre + j + u * kP, xv[u]);
    }
    ErfCore<ErfOut::kGelu, kU>(xv, xv, res);
    for (int u = 0; u < kU; ++u) ei::pstoreu(y + j + u * kP, res[u]);
  };
  constexpr int kUnroll = 2;
  int64_t j = 0;
  for (; j + kUnroll * kP <= n; j += kUnroll * kP) {
    run(j, std::integral_constant<int, kUnroll>{});
  }
  for (; j < n; j += kP) run(j, std::integral_constant<int, 1>{});
}

// BiasGeluGrad's one pass over four rows (row stride ld, fused_act.cc):
// g[r] = dy[r] gelu'(pre[r]), exact form, and sum[k] = (g0[k] + g1[k]) +
// (g2[k] + g3[k]) in float (the first step of rows.h ColumnSum's fold), over
// n columns, a whole number of packets, unaligned.
inline void GeluSlopeRows4(const float* pre, const float* dy, float* g,
                           int64_t ld, int64_t n, float* sum) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<float>::type;
  constexpr int64_t kP = kPacket<float>;
  for (int64_t j = 0; j < n; j += kP) {
    // Two rows at a time (two packets in flight, as ErfPackets).
    Packet half[2];
    for (int h = 0; h < 2; ++h) {
      Packet xv[2], dv[2], res[2];
      for (int r = 0; r < 2; ++r) {
        xv[r] = ei::ploadu<Packet>(pre + (2 * h + r) * ld + j);
        dv[r] = ei::ploadu<Packet>(dy + (2 * h + r) * ld + j);
      }
      ErfCore<ErfOut::kSlope, 2>(xv, dv, res);
      for (int r = 0; r < 2; ++r) ei::pstoreu(g + (2 * h + r) * ld + j, res[r]);
      half[h] = ei::padd(res[0], res[1]);
    }
    ei::pstoreu(sum + j, ei::padd(half[0], half[1]));
  }
}

}  // namespace gelu

// x·Φ(x), Φ(x) = erfc(-x/√2)/2, which (unlike 1 + erf(x/√2)) keeps its
// relative accuracy for negative x; gelu(-inf) is its limit, -0. The
// scalar form (float in double, for float16 / bfloat16 and integers'
// sake) is the reference; float runs take gelu::ErfPackets (above): whole
// packets read and written in place, a tail shorter than a packet padded.
template <typename T>
struct GeluErfOp {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
  T operator()(T x) const {
    if (std::isinf(x) && x < T(0)) return T(-0.0);
    const Acc v = x;
    return static_cast<T>(Acc(0.5) * v *
                          std::erfc(Acc(-0.70710678118654752440) * v));
  }
  void Run(const T* x, T* y, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      const int64_t full = n / kPacket<float> * kPacket<float>;
      gelu::ErfPackets<gelu::ErfOut::kGelu, false>(x, nullptr, y, full);
      if (full == n) return;
      alignas(64) float in[kPacket<float>];
      alignas(64) float out[kPacket<float>];
      for (int64_t j = 0; j < kPacket<float>; ++j) {
        in[j] = full + j < n ? x[full + j] : 0.0f;
      }
      gelu::ErfPackets<gelu::ErfOut::kGelu, true>(in, nullptr, out,
                                                  kPacket<float>);
      for (int64_t j = full; j < n; ++j) y[j] = out[j - full];
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = (*this)(x[i]);
    }
  }
};

// The tanh form, x·(1 + tanh(u))/2 with u = √(2/π)(x + 0.044715x³), as
// x / (1 + e^(-2u)) for the same reason. Where e^(-2u) nears overflow
// (x below kFix) the result is tiny: x·e^(2u) / (1 + e^(2u)) there, and
// gelu(-inf) is its limit, -0.
template <typename T>
struct GeluTanhOp {
  static constexpr T kC1 = T(-1.5957691216057307117);  // -2√(2/π)
  static constexpr T kC3 = T(-0.071354816272600249);   // kC1 · 0.044715
  static constexpr T kFix = std::is_same_v<T, float> ? T(-9) : T(-20);
  T operator()(T x) const {
    const T v = x * (kC1 + kC3 * x * x);  // -2u
    if (v <= T(0)) return x / (T(1) + std::exp(v));
    if (std::isinf(x)) return T(-0.0);
    const T e = std::exp(-v);
    return x * e / (T(1) + e);
  }
  void Run(const T* x, T* y, int64_t n) const {
    RunWithFixup(
        x, y, n, kFix, std::numeric_limits<T>::infinity(),
        [](const auto& v) {
          return v / (T(1) + (v * (kC1 + kC3 * v.square())).exp());
        },
        *this);
  }
};

// log(1 + e^(βx)) / β, or x where βx > threshold. With z = βx the log is
// taken as max(z, 0) + log1p(e^-|z|), which cannot overflow whatever the
// threshold; the scalar form serves |z| beyond the vectorised exp's range.
template <typename T>
struct SoftplusOp {
  T beta, threshold;
  T operator()(T x) const {
    const T z = beta * x;
    if (z > threshold) return x;
    return ((z > T(0) ? z : T(0)) + std::log1p(std::exp(-std::fabs(z)))) /
           beta;
  }
  void Run(const T* x, T* y, int64_t n) const {
    const T fix = -ExpRange<T>::kLo / std::fabs(beta);  // |βx| beyond exp's
    ForEachPaddedBlock(x, y, n, [&](const T* in, T* out, int64_t m,
                                    int64_t padded) {
      const auto z = beta * ConstAlignedMap<T>(in, padded);
      AlignedMap<T>(out, padded) =
          (z.max(T(0)) + (-z.abs()).exp().log1p()) / beta;
      if (CountOutside(in, m, -fix, fix) != 0) {
        for (int64_t j = 0; j < m; ++j) {
          if (std::fabs(in[j]) > fix) out[j] = (*this)(in[j]);
        }
      }
      for (int64_t j = 0; j < m; ++j) {
        out[j] = beta * in[j] > threshold ? in[j] : out[j];
      }
    });
  }
};

// NumPy's clip: minimum(maximum(x, lo), hi), NaN-propagating. An unset
// bound is passed as -inf / +inf (or the integer type's limits).
template <typename T>
struct ClipOp {
  static constexpr bool kEigen = true;
  T lo, hi;
  T operator()(T x) const {
    if (IsNan(x) || IsNan(lo) || IsNan(hi)) {
      return IsNan(x) ? x : IsNan(lo) ? lo : hi;
    }
    const T y = x > lo ? x : lo;
    return y < hi ? y : hi;
  }
  template <typename X>
  auto Array(const X& x) const {
    return ArrayX<T>::Constant(x.size(), hi)
        .template min<Eigen::PropagateNaN>(
            ArrayX<T>::Constant(x.size(), lo)
                .template max<Eigen::PropagateNaN>(x));
  }
};

template <typename T>
struct FloorOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return std::floor(x); }
  template <typename X>
  auto Array(const X& x) const { return x.floor(); }
};

template <typename T>
struct CeilOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return std::ceil(x); }
  template <typename X>
  auto Array(const X& x) const { return x.ceil(); }
};

// Half to even (NumPy's rint) under the default rounding mode.
template <typename T>
struct RoundOp {
  static constexpr bool kEigen = true;
  T operator()(T x) const { return std::nearbyint(x); }
  template <typename X>
  auto Array(const X& x) const { return x.rint(); }
};

// The functions of unary_math.cc: the C library's scalar forms (correctly
// rounded or within an ulp, the same in every build and position).
#define CPU_EIGEN_EW_LIBM_OP_(NAME, FN)       \
  template <typename T>                      \
  struct NAME {                              \
    T operator()(T x) const { return std::FN(x); } \
  };
CPU_EIGEN_EW_LIBM_OP_(TanOp, tan)
CPU_EIGEN_EW_LIBM_OP_(AsinOp, asin)
CPU_EIGEN_EW_LIBM_OP_(AcosOp, acos)
CPU_EIGEN_EW_LIBM_OP_(AtanOp, atan)
CPU_EIGEN_EW_LIBM_OP_(SinhOp, sinh)
CPU_EIGEN_EW_LIBM_OP_(CoshOp, cosh)
CPU_EIGEN_EW_LIBM_OP_(AsinhOp, asinh)
CPU_EIGEN_EW_LIBM_OP_(AcoshOp, acosh)
CPU_EIGEN_EW_LIBM_OP_(AtanhOp, atanh)
CPU_EIGEN_EW_LIBM_OP_(ErfOp, erf)
CPU_EIGEN_EW_LIBM_OP_(Expm1Op, expm1)
#undef CPU_EIGEN_EW_LIBM_OP_

// ---------------------------------------------------------- binary ops

struct AddOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const { return WrapAdd(a, b); }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const { return a + b; }
};

struct SubOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const { return WrapSub(a, b); }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const { return a - b; }
};

struct MulOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const { return WrapMul(a, b); }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const { return a * b; }
};

struct DivOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const { return a / b; }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const { return a / b; }
};

// C's pow (NumPy's element-wise float power). Eigen 3.4's vectorised pow
// is several times slower than libm's for SSE packets, so it stays scalar.
struct PowOp {
  template <typename T>
  T operator()(T a, T b) const { return std::pow(a, b); }
};

// a·a, which equals pow(a, 2) exactly (both are correctly rounded).
struct SquareAOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T) const { return a * a; }
  template <typename A, typename B>
  auto Array(const A& a, const B&) const { return a.square(); }
};

// NumPy's maximum/minimum: NaN propagates, and ties (±0) give b.
struct MaximumOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a > b ? a : b;
  }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const {
    return b.template max<Eigen::PropagateNaN>(a);
  }
};

struct MinimumOp {
  static constexpr bool kEigen = true;
  template <typename T>
  T operator()(T a, T b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a < b ? a : b;
  }
  template <typename A, typename B>
  auto Array(const A& a, const B& b) const {
    return b.template min<Eigen::PropagateNaN>(a);
  }
};

// Division and remainder (int_arith.cc). Integers never trap: a zero
// divisor gives 0 and MIN / -1 wraps to MIN (remainder 0), NumPy's values.

// a / b rounded toward -inf; floats as NumPy's npy_divmod.
struct FloorDivideOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (b == T(0)) return a / b;
      const T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
      if (div != T(0)) {
        T floordiv = std::floor(div);
        if (div - floordiv > T(0.5)) floordiv += T(1);
        return floordiv;
      }
      return std::copysign(T(0), a / b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return WrapNeg(a);  // MIN // -1 wraps
        const T q = static_cast<T>(a / b);
        const T r = static_cast<T>(a % b);
        return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(q - 1)
                                                         : q;
      } else {
        return static_cast<T>(a / b);
      }
    }
  }
};

// a / b rounded toward zero.
struct TruncDivideOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::trunc(a / b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return WrapNeg(a);
      }
      return static_cast<T>(a / b);
    }
  }
};

// NumPy's remainder: the sign of b (x % 0 is NaN for floats).
struct ModOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (b == T(0)) return std::fmod(a, b);
      T mod = std::fmod(a, b);
      if (mod != T(0)) {
        if ((b < T(0)) != (mod < T(0))) mod += b;
      } else {
        mod = std::copysign(T(0), b);
      }
      return mod;
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
        const T r = static_cast<T>(a % b);
        return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? static_cast<T>(r + b)
                                                         : r;
      } else {
        return static_cast<T>(a % b);
      }
    }
  }
};

// C's fmod: the sign of a.
struct FmodOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else {
      if (b == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
      }
      return static_cast<T>(a % b);
    }
  }
};

// ------------------------------------------------------------ run loops

template <typename F, typename = void>
struct HasEigenForm : std::false_type {};
template <typename F>
struct HasEigenForm<F, std::void_t<decltype(F::kEigen)>>
    : std::bool_constant<F::kEigen> {};

template <typename F, typename T, typename Out, typename = void>
struct HasRunForm : std::false_type {};
template <typename F, typename T, typename Out>
struct HasRunForm<F, T, Out,
                  std::void_t<decltype(std::declval<const F&>().Run(
                      std::declval<const T*>(), std::declval<Out*>(),
                      int64_t{0}))>> : std::true_type {};

// True when F's Eigen form serves T -> Out.
template <typename F, typename T, typename Out>
constexpr bool kUseEigen = HasEigenForm<F>::value &&
                           std::is_floating_point_v<T> &&
                           std::is_same_v<T, Out>;

// y[i] = f(x[i]) for i < n, contiguous.
template <typename T, typename Out, typename F>
inline void UnaryRun(const F& f, const T* x, Out* y, int64_t n) {
  if constexpr (HasRunForm<F, T, Out>::value) {
    f.Run(x, y, n);
  } else if constexpr (kUseEigen<F, T, Out>) {
    ArrayMap<Out>(y, n) = f.Array(ConstArrayMap<T>(x, n));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  }
}

// y[i] = f(a[i], b[i]) for i < n, contiguous, where `form` says which
// operand (if any) is the single element a[0] or b[0] repeated.
template <typename T, typename Out, typename F>
inline void BinaryRun(const F& f, BinaryForm form, const T* a, const T* b,
                      Out* y, int64_t n) {
  if constexpr (kUseEigen<F, T, Out>) {
    ArrayMap<Out> out(y, n);
    switch (form) {
      case BinaryForm::kVV:
        out = f.Array(ConstArrayMap<T>(a, n), ConstArrayMap<T>(b, n));
        break;
      case BinaryForm::kSV:
        out = f.Array(ArrayX<T>::Constant(n, *a), ConstArrayMap<T>(b, n));
        break;
      case BinaryForm::kVS:
        out = f.Array(ConstArrayMap<T>(a, n), ArrayX<T>::Constant(n, *b));
        break;
    }
  } else {
    switch (form) {
      case BinaryForm::kVV:
        for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
        break;
      case BinaryForm::kSV: {
        const T s = *a;
        for (int64_t i = 0; i < n; ++i) y[i] = f(s, b[i]);
        break;
      }
      case BinaryForm::kVS: {
        const T s = *b;
        for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], s);
        break;
      }
    }
  }
}

}  // namespace CPU_EIGEN_EW_NS
}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_ELEMENTWISE_OPS_H_
