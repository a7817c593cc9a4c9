// GeluGrad's contiguous float / double runs (see gelu_grad.cc for the
// math), included by elementwise_isa.cc only: built once per instruction
// set inside cpu_eigen::CPU_EIGEN_EW_NS (Eigen renamed there), reached
// through FloatKernels<T>::gelu_grad.
#ifndef DRAGON_CPU_EIGEN_GELU_GRAD_H_
#define DRAGON_CPU_EIGEN_GELU_GRAD_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "elementwise_ops.h"

namespace cpu_eigen {
namespace CPU_EIGEN_EW_NS {
namespace gelu_grad {

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

// The exact form: gelu::ErfPackets (elementwise_ops.h), the formula the
// forward (GeluErfOp) shares (the math is described there).
void ErfBlockF32(const float* x, const float* dy, float* dx, int64_t,
                 int64_t padded) {
  gelu::ErfPackets<gelu::ErfOut::kSlope, true>(x, dy, dx, padded);
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
  // would stay ~3e-39 instead of underflowing: e^(-|v|/2) squared does
  // underflow (and needs no select, which Eigen does not vectorise).
  q = (v.abs() * -0.5f).exp().square();
  p = 1.0f / (1.0f + q);
  q = q * p;
  // s(v) = q + (p - q) h, h = 1 for v > 0, 0 for v <= 0 (exactly q
  // there; p = q = 1/2 at v = 0), with h = min(max(1e30 v, 0), 1) (min and
  // max vectorise, Eigen's sign and select do not); for 0 < v < 1e-30, h
  // is fractional but p - q ~ v/2 is below any rounding of the result.
  AlignedMap<float>(dx, padded) =
      ConstAlignedMap<float>(dy, padded) *
      (q + (p - q) * (v * 1e30f).max(0.0f).min(1.0f) +
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

}  // namespace gelu_grad

// dx[0, n) = dy * gelu'(x) over contiguous runs.
template <typename T>
void GeluGradRun(bool tanh, const T* x, const T* dy, T* dx, int64_t n) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) {
      dx[i] = dy[i] * (tanh ? gelu_grad::GeluTanhSlope(x[i])
                            : gelu_grad::GeluErfSlope(x[i]));
    }
  } else if (tanh) {
    gelu_grad::RunFloatRange(x, dy, dx, 0, n, &gelu_grad::TanhBlockF32);
  } else {
    // Whole packets straight from the tensors (no copies), the rest padded.
    const int64_t full = n / kPacket<float> * kPacket<float>;
    gelu::ErfPackets<gelu::ErfOut::kSlope, false>(x, dy, dx, full);
    gelu_grad::RunFloatRange(x + full, dy + full, dx + full, 0, n - full,
                             &gelu_grad::ErfBlockF32);
  }
}

// pre[0, n) = x + bias, y[0, n) = gelu(pre) (exact form): BiasGelu's row
// (fused_act.cc), the same bits as Add then Gelu (one float add; the
// packet formula, a short tail through GeluErfOp's padded packet).
inline void BiasGeluRunF32(const float* x, const float* bias, float* pre,
                           float* y, int64_t n) {
  const int64_t full = n / kPacket<float> * kPacket<float>;
  gelu::BiasGeluPackets(x, bias, pre, y, full);
  if (full == n) return;
  for (int64_t j = full; j < n; ++j) pre[j] = x[j] + bias[j];
  GeluErfOp<float>{}.Run(pre + full, y + full, n - full);
}

// g = dy gelu'(pre) (exact form) over `rows` (<= 4) rows of `cols`
// elements, row stride ld, and acc[k] += their column sum in rows.h
// ColumnSum's order: four rows as ((g0 + g1) + (g2 + g3)) in float then
// widened, fewer one by one. BiasGeluGrad's group of rows (fused_act.cc).
inline void GeluSlopeRowsF32(const float* pre, const float* dy, float* g,
                             int64_t ld, int64_t rows, int64_t cols,
                             double* acc) {
  if (rows == 4) {
    const int64_t full = cols / kPacket<float> * kPacket<float>;
    constexpr int64_t kChunk = 1024;  // columns per pass (4 KiB of sums)
    alignas(64) float sum[kChunk];
    for (int64_t c0 = 0; c0 < full; c0 += kChunk) {
      const int64_t w = full - c0 < kChunk ? full - c0 : kChunk;
      gelu::GeluSlopeRows4(pre + c0, dy + c0, g + c0, ld, w, sum);
      double* a = acc + c0;
      for (int64_t k = 0; k < w; ++k) a[k] += static_cast<double>(sum[k]);
    }
    if (full == cols) return;
    for (int64_t r = 0; r < 4; ++r) {
      GeluGradRun<float>(false, pre + r * ld + full, dy + r * ld + full,
                         g + r * ld + full, cols - full);
    }
    for (int64_t k = full; k < cols; ++k) {
      acc[k] += static_cast<double>((g[k] + g[ld + k]) +
                                    (g[2 * ld + k] + g[3 * ld + k]));
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * ld;
    GeluGradRun<float>(false, pre + r * ld, dy + r * ld, g + r * ld, cols);
    for (int64_t k = 0; k < cols; ++k) acc[k] += static_cast<double>(gr[k]);
  }
}

}  // namespace CPU_EIGEN_EW_NS
}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GELU_GRAD_H_
