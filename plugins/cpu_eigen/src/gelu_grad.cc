// GeluGrad(x, dy) -> dx = dy * gelu'(x), one pass over x and dy (issue 21:
// the gradient written with ops recomputed Phi(x) as gelu(x) / x in a fused
// group of ~20 element-wise steps, 6x slower than one kernel).
//
//   exact form:  gelu'(x) = Phi(x) + x phi(x),
//                Phi the standard normal CDF, phi its density;
//   tanh form:   gelu(x) = x s(v), s the logistic sigmoid,
//                v = x (K1 + K3 x^2), K1 = 2 sqrt(2/pi), K3 = 0.044715 K1,
//                gelu'(x) = s(v) + x s(v) s(-v) (K1 + 3 K3 x^2).
//
// float runs on aligned blocks padded to whole packets (every element takes
// the packet path, so a result never depends on its position):
//   * exact form: Phi from Eigen's vectorised erf, accurate where
//     1 + erf(x/sqrt 2) does not cancel (x >= -1); the x < -1 values are
//     gathered into double packets, where Phi(x) = gelu(x) / x comes from
//     GeluErfNegativeTail (elementwise_ops.h, relative error < 1.3e-10) and
//     x phi(x) is taken in double too. The two terms nearly cancel there
//     (their sum is -phi(x) (|x| - 1/|x| + ...)), hence double.
//   * tanh form: with e = exp(-|v|) <= 1, p = 1 / (1 + e), q = e p, the
//     pair (s(v), s(-v)) is (p, q) for v >= 0 and (q, p) for v < 0: no
//     exp overflows and neither sigmoid loses its small tail to 1 - s.
// x is clamped to [-40, 40] (exact) / [-30, 30] (tanh), where gelu' is 0 or
// 1 to every dtype's precision, so x = +-inf gives 0 / 1 rather than
// inf * 0; a NaN x gives NaN.
// double: scalar erfc / exp per element. float16 / bfloat16: widened to
// float per block, the float path, rounded once.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

namespace ew = ew_base;
using ew::AlignedMap;
using ew::ConstAlignedMap;
using ew::kBlock;
using ew::kPacket;

constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kK1 = 1.5957691216057307117;   // 2 sqrt(2 / pi)
constexpr double kK3 = 0.071354816272600249;    // K1 * 0.044715
constexpr double kErfClamp = 40.0;
constexpr double kTanhClamp = 30.0;

// ------------------------------------------------------------- scalar forms

// gelu'(x), exact form, in double (also the float reference of the tests).
inline double GeluErfSlope(double x) {
  if (std::isnan(x)) return x;
  const double c = x < -kErfClamp ? -kErfClamp
                   : x > kErfClamp ? kErfClamp : x;
  return 0.5 * std::erfc(-kInvSqrt2 * c) +
         c * std::exp(-0.5 * c * c) * kInvSqrt2Pi;
}

inline double GeluTanhSlope(double x) {
  if (std::isnan(x)) return x;
  const double c = x < -kTanhClamp ? -kTanhClamp
                   : x > kTanhClamp ? kTanhClamp : x;
  const double v = c * (kK1 + kK3 * c * c);
  const double e = std::exp(-std::fabs(v));
  const double p = 1.0 / (1.0 + e), q = e * p;
  return (v >= 0.0 ? p : q) + c * p * q * (kK1 + 3.0 * kK3 * c * c);
}

// ---------------------------------------------------------- float blocks

// dx[0, m) = dy * gelu'(x) for one block; x, dy, dx 64-byte aligned with
// room for `padded` elements (x padded with zeros).
void ErfBlockF32(const float* x, const float* dy, float* dx, int64_t m,
                 int64_t padded) {
  const auto xv = ConstAlignedMap<float>(x, padded);
  const auto c = xv.max(-40.0f).min(40.0f);
  AlignedMap<float>(dx, padded) =
      ConstAlignedMap<float>(dy, padded) *
      (0.5f + 0.5f * (c * static_cast<float>(kInvSqrt2)).erf() +
       c * (c.square() * -0.5f).exp() * static_cast<float>(kInvSqrt2Pi));
  if (ew::CountOutside(x, m, -1.0f, std::numeric_limits<float>::infinity()) !=
      0) {
    alignas(64) double v[kBlock + 16];
    alignas(64) double g[kBlock + 16];
    int32_t at[kBlock];
    int64_t k = 0;
    for (int64_t j = 0; j < m; ++j) {
      if (x[j] < -1.0f) {
        at[k] = static_cast<int32_t>(j);
        v[k++] = x[j] < -40.0f ? -40.0 : static_cast<double>(x[j]);
      }
    }
    const int64_t kp =
        (k + kPacket<double> - 1) / kPacket<double> * kPacket<double>;
    for (int64_t j = k; j < kp; ++j) v[j] = -2.0;  // padding
    for (int64_t j = 0; j < kp; ++j) g[j] = v[j];
    ew::GeluErfNegativeTail(g, kp);  // g = x Phi(x)
    AlignedMap<double> vm(v, kp), gm(g, kp);
    gm = gm / vm + vm * (vm.square() * -0.5).exp() * kInvSqrt2Pi;
    for (int64_t j = 0; j < k; ++j) {
      dx[at[j]] = static_cast<float>(static_cast<double>(dy[at[j]]) * g[j]);
    }
  }
  for (int64_t j = 0; j < m; ++j) {
    if (std::isnan(x[j])) dx[j] = x[j];
  }
}

void TanhBlockF32(const float* x, const float* dy, float* dx, int64_t m,
                  int64_t padded) {
  const auto c = ConstAlignedMap<float>(x, padded).max(-30.0f).min(30.0f);
  alignas(64) float vb[kBlock];
  alignas(64) float pb[kBlock];
  alignas(64) float qb[kBlock];
  AlignedMap<float> v(vb, padded), p(pb, padded), q(qb, padded);
  v = c * (static_cast<float>(kK1) + static_cast<float>(kK3) * c.square());
  // Eigen's float exp clamps its argument at about -88.7, so e^(-|v|)
  // would stay ~3e-39 instead of underflowing: zero it past that.
  q = (v.abs() > 87.0f).select(0.0f, (-v.abs()).exp());
  p = 1.0f / (1.0f + q);
  q = q * p;
  AlignedMap<float>(dx, padded) =
      ConstAlignedMap<float>(dy, padded) *
      ((v >= 0.0f).select(p, q) +
       c * p * q *
           (static_cast<float>(kK1) + static_cast<float>(3.0 * kK3) * c.square()));
  for (int64_t j = 0; j < m; ++j) {
    if (std::isnan(x[j])) dx[j] = x[j];
  }
}

// Runs block(x, dy, dx, m, padded) over [begin, end) of float data.
template <typename Block>
void RunFloatRange(const float* x, const float* dy, float* dx, int64_t begin,
                   int64_t end, Block block) {
  alignas(64) float xb[kBlock];
  alignas(64) float db[kBlock];
  alignas(64) float ob[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t m = end - b < kBlock ? end - b : kBlock;
    const int64_t padded =
        (m + kPacket<float> - 1) / kPacket<float> * kPacket<float>;
    for (int64_t j = 0; j < m; ++j) xb[j] = x[b + j];
    for (int64_t j = 0; j < m; ++j) db[j] = dy[b + j];
    for (int64_t j = m; j < padded; ++j) xb[j] = db[j] = 0.0f;
    block(xb, db, ob, m, padded);
    for (int64_t j = 0; j < m; ++j) dx[b + j] = ob[j];
  }
}

// Same, 16-bit inputs widened to float per block, the result rounded once.
template <typename H, typename Block>
void RunHalfRange(const H* x, const H* dy, H* dx, int64_t begin, int64_t end,
                  Block block) {
  alignas(64) float xb[kBlock];
  alignas(64) float db[kBlock];
  alignas(64) float ob[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t m = end - b < kBlock ? end - b : kBlock;
    const int64_t padded =
        (m + kPacket<float> - 1) / kPacket<float> * kPacket<float>;
    for (int64_t j = 0; j < m; ++j) xb[j] = static_cast<float>(x[b + j]);
    for (int64_t j = 0; j < m; ++j) db[j] = static_cast<float>(dy[b + j]);
    for (int64_t j = m; j < padded; ++j) xb[j] = db[j] = 0.0f;
    block(xb, db, ob, m, padded);
    for (int64_t j = 0; j < m; ++j) dx[b + j] = static_cast<H>(ob[j]);
  }
}

// ------------------------------------------------------------------ kernel

template <typename T>
void GeluGrad(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           ctx.op_name(), ": approximate must be \"none\" or \"tanh\", got \"",
           mode, "\"");
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dx = ctx.output(0);
  const int64_t n = x.numel();
  DG_CHECK(dy.numel() == n && dx.numel() == n, DG_INTERNAL, ctx.op_name(),
           ": x has ", n, " elements, dy ", dy.numel(), ", dx ", dx.numel());
  if (n == 0) return;
  const bool tanh = mode == "tanh";
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pdy = static_cast<const T*>(dy.raw_data());
  T* pdx = static_cast<T*>(dx.raw_data());
  const int64_t cost = elementwise::kCostHeavy;
  elementwise::ForRange(n, cost, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, double>) {
      for (int64_t i = begin; i < end; ++i) {
        pdx[i] = pdy[i] * (tanh ? GeluTanhSlope(px[i]) : GeluErfSlope(px[i]));
      }
    } else if constexpr (std::is_same_v<T, float>) {
      if (tanh) {
        RunFloatRange(px, pdy, pdx, begin, end, &TanhBlockF32);
      } else {
        RunFloatRange(px, pdy, pdx, begin, end, &ErfBlockF32);
      }
    } else {
      if (tanh) {
        RunHalfRange(px, pdy, pdx, begin, end, &TanhBlockF32);
      } else {
        RunHalfRange(px, pdy, pdx, begin, end, &ErfBlockF32);
      }
    }
  });
}

DG_KERNEL("GeluGrad", "cpu", GeluGrad, float, double, CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
