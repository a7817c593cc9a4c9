// Value conversion between the ten dtypes, shared by Cast and by the kernels
// that turn a float attribute into an element (Fill, Arange, Pad, OneHot).
//
// Rules (docs/ops.md, Cast):
//  - to bool: x != 0 (NaN is true, as in NumPy);
//  - bool to anything: 0 or 1;
//  - integer to integer: C++ conversion (two's complement wrap-around);
//  - float to integer: truncation toward zero. C++ leaves out-of-range
//    conversions undefined; here they saturate to the target's min/max and
//    NaN gives 0, so the result is the same on every machine;
//  - to float16/bfloat16: correctly rounded (nearest, ties to even), also
//    from float64 and int64, which go through round-to-odd intermediates so
//    that the chained roundings equal a single one.
#ifndef DRAGON_CPU_EIGEN_CAST_H_
#define DRAGON_CPU_EIGEN_CAST_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common.h"

namespace cpu_eigen {

template <typename T>
constexpr bool kIsHalf =
    std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;

// float32 nearest to d in round-to-odd mode: inexact results get an odd last
// mantissa bit. Rounding that to a format with at least two fewer mantissa
// bits gives the correctly rounded result of d.
inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --bits;  // truncate
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(bits));
  return f;
}

// The double nearest to x in round-to-odd mode (exact when |x| < 2^53), so
// that int64 -> double -> float (round-to-odd) -> 16-bit rounds only once.
inline double RoundToOddDouble(int64_t x) {
  uint64_t u =
      x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  if (u >> 53) {
    const int shift = 64 - __builtin_clzll(u) - 53;  // bits that do not fit
    const uint64_t low = u & ((uint64_t{1} << shift) - 1);
    u -= low;
    if (low != 0) u |= uint64_t{1} << shift;  // sticky bit
  }
  const double d = static_cast<double>(u);
  return x < 0 ? -d : d;
}

// The same for uint64 (values up to 2^64 - 1).
inline double RoundToOddDoubleU(uint64_t u) {
  if (u >> 53) {
    const int shift = 64 - __builtin_clzll(u) - 53;
    const uint64_t low = u & ((uint64_t{1} << shift) - 1);
    u -= low;
    if (low != 0) u |= uint64_t{1} << shift;
  }
  return static_cast<double>(u);
}

// Truncates d toward zero into integer type T, saturating out-of-range
// values and mapping NaN to 0.
template <typename T>
inline T SaturatingCast(double d) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  // 2^digits: the first value above max (exact in double for every T).
  constexpr double kHiExclusive =
      static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  if (!(d == d)) return T(0);
  if (d >= kHiExclusive) return std::numeric_limits<T>::max();
  if (d <= kLo) return std::numeric_limits<T>::min();
  return static_cast<T>(d);
}

// float32 -> bfloat16 bits, nearest with ties to even; a NaN becomes the
// quiet NaN of its sign (0x7FC0 / 0xFFC0). Bit for bit Eigen::bfloat16(x),
// written without branches so loops over it vectorise (Eigen's conversion
// is a scalar call per element: ~50x slower on a float32 activation).
inline uint16_t FloatToBfloat16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16 & 0x8000u) | 0x7FC0u;
  // A signed compare (both sides are below 2^31): SSE2 has one, so the loop
  // vectorises on the baseline; an unsigned compare kept it scalar.
  const int32_t magnitude = static_cast<int32_t>(u & 0x7FFFFFFFu);
  return static_cast<uint16_t>(magnitude > 0x7F800000 ? nan : rounded);
}

// n float32 values to bfloat16 (as above): a vectorised loop, built for
// AVX-512 too and chosen at first use (cast.cc; DRAGON_CPU_EIGEN_ISA caps
// it as it caps the GEMM).
void FloatToBfloat16(const float* x, Eigen::bfloat16* y, int64_t n);

// n bfloat16 values to float32 (exact: the bits shifted up).
inline void Bfloat16ToFloat(const Eigen::bfloat16* x, float* y, int64_t n) {
  const uint16_t* in = reinterpret_cast<const uint16_t*>(x);
  uint32_t* out = reinterpret_cast<uint32_t*>(y);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
}

// Converts one value of type From to type To following the rules above.
template <typename To, typename From>
inline To Convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (kIsHalf<From>) {
      return static_cast<float>(x) != 0.0f;
    } else {
      return x != From(0);
    }
  } else if constexpr (std::is_same_v<From, bool>) {
    // A bool holds 0 or 1: widen it, no branch (masks are random data).
    if constexpr (kIsHalf<To>) {
      return To(static_cast<float>(static_cast<unsigned char>(x)));
    } else {
      return static_cast<To>(static_cast<unsigned char>(x));
    }
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_integral_v<From>) {
      return static_cast<To>(x);
    } else if constexpr (kIsHalf<From>) {
      return SaturatingCast<To>(static_cast<double>(static_cast<float>(x)));
    } else {
      return SaturatingCast<To>(static_cast<double>(x));
    }
  } else if constexpr (kIsHalf<To>) {
    if constexpr (std::is_same_v<From, float>) {
      return To(x);
    } else if constexpr (kIsHalf<From>) {
      return To(static_cast<float>(x));
    } else if constexpr (std::is_integral_v<From> && sizeof(From) <= 2) {
      return To(static_cast<float>(x));  // exact in float
    } else if constexpr (std::is_same_v<From, int64_t>) {
      return To(RoundToOddFloat(RoundToOddDouble(x)));
    } else if constexpr (std::is_same_v<From, uint64_t>) {
      return To(RoundToOddFloat(RoundToOddDoubleU(x)));
    } else {
      return To(RoundToOddFloat(static_cast<double>(x)));
    }
  } else {  // To is float or double
    if constexpr (kIsHalf<From>) {
      return static_cast<To>(static_cast<float>(x));
    } else {
      return static_cast<To>(x);
    }
  }
}

// Calls fn(T{}) with the C++ type of dtype t.
template <typename Fn>
void DispatchDType(DgDType t, Fn&& fn) {
  switch (t) {
    case DG_BOOL:
      fn(bool{});
      return;
    case DG_UINT8:
      fn(uint8_t{});
      return;
    case DG_INT8:
      fn(int8_t{});
      return;
    case DG_INT16:
      fn(int16_t{});
      return;
    case DG_INT32:
      fn(int32_t{});
      return;
    case DG_INT64:
      fn(int64_t{});
      return;
    case DG_FLOAT16:
      fn(Eigen::half{});
      return;
    case DG_BFLOAT16:
      fn(Eigen::bfloat16{});
      return;
    case DG_FLOAT32:
      fn(float{});
      return;
    case DG_FLOAT64:
      fn(double{});
      return;
    case DG_UINT16:
      fn(uint16_t{});
      return;
    case DG_UINT32:
      fn(uint32_t{});
      return;
    case DG_UINT64:
      fn(uint64_t{});
      return;
    default:
      throw dg::Error(DG_INVALID_ARGUMENT,
                      dg::Str("unknown dtype code ", static_cast<int>(t)));
  }
}

// Writes `value` converted to dtype t into dst (dg::DTypeSize(t) bytes).
inline void StoreScalar(double value, DgDType t, void* dst) {
  DispatchDType(t, [&](auto tag) {
    using T = decltype(tag);
    const T v = Convert<T>(value);
    std::memcpy(dst, &v, sizeof(T));
  });
}

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_CAST_H_
