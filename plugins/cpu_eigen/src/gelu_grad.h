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

// erfc(z) = e^(-z^2) t P(t), t = 1 / (1 + z/2), for every z >= 0 (t in
// (0, 1]): P of degree 12, fitted here (weighted least squares in relative
// error on Chebyshev nodes of t in [0, 1] against mpmath's erfc, then each
// coefficient rounded to float in turn with the later ones refitted):
// relative error below 5.2e-8 (0.9 float ulp, reached at t -> 0, z -> inf;
// below 1.3e-9 before the rounding). Unlike kErfcTailP (t <= 0.75), it
// covers z near 0, so one formula serves the whole line.
inline constexpr float kErfcP32[13] = {
    0.282094806f,  0.282093108f,  0.246889368f,  0.175449222f,
    0.0908920467f, -0.0395751446f, 0.0479329191f, -0.230041146f,
    0.1054601f,    0.199225247f,  -0.260344177f, 0.120813042f,
    -0.0208893903f};

// dx[0, m) = dy * gelu'(x) for one block; x, dy, dx 64-byte aligned with
// room for `padded` elements (x padded with zeros). All in float packets,
// one formula for every x (no branch, no gather, no double):
//   c = x clamped to [-40, 40], a = |c| / sqrt 2, t = 1 / (1 + a/2),
//   E = e^(-c^2/2), q = Phi(-|c|) = erfc(a) / 2 = E t P(t) / 2,
//   Phi(c) = q for c < 0 and 1 - q for c >= 0 (no cancellation either way),
//   gelu'(c) = Phi(c) + c E / sqrt(2 pi)
//            = H + E (t P(t) / 2 (1 - 2H) + c / sqrt(2 pi)), H = [c > 0].
// E carries the result's relative accuracy for x < 0, and e^(-c^2/2) with
// c^2 rounded would lose c^2/2 ulp (50 at x = -10): so c = h + (c - h) with
// h = c rounded to a multiple of 1/64 (h^2 exact, c - h exact),
// E = e^(-h^2/4) e^(-(c - h)(c + h)/2) e^(-h^2/4), where every argument is
// exact or small (the middle factor is a short Taylor series); the two
// half factors keep E from the float exp's clamp (Eigen's exp(-1000) is
// 2.9e-39, not 0) since their product underflows.
// H = min(max(1e30 c, 0), 1) (select does not vectorise in Eigen; for
// 0 < c < 1e-30, H is fractional but then q = 1/2 and Phi = 1/2 either way).
// Written with Eigen's packet functions so that the whole formula stays in
// registers (as array statements it was a dozen passes over the block).
// Over n elements (a whole number of packets); loads and stores aligned or
// not (the values are the same either way). A NaN x gives NaN (selected per
// packet, so dx may be x or dy).
template <bool kAligned>
void ErfPackets(const float* x, const float* dy, float* dx, int64_t n) {
  namespace ei = Eigen::internal;
  constexpr int kAlign = kAligned ? Eigen::Aligned64 : Eigen::Unaligned;
  using Packet = typename ei::packet_traits<float>::type;
  const Packet lo = ei::pset1<Packet>(-40.0f), hi = ei::pset1<Packet>(40.0f);
  const Packet one = ei::pset1<Packet>(1.0f), half = ei::pset1<Packet>(0.5f);
  const Packet zero = ei::pset1<Packet>(0.0f);
  const Packet k_half_a =
      ei::pset1<Packet>(static_cast<float>(0.5 * kInvSqrt2));
  const Packet k_pdf = ei::pset1<Packet>(static_cast<float>(kInvSqrt2Pi));
  const Packet k64 = ei::pset1<Packet>(64.0f);
  const Packet k64_inv = ei::pset1<Packet>(0.015625f);
  const Packet k_round = ei::pset1<Packet>(12582912.0f);
  const Packet k_quarter = ei::pset1<Packet>(-0.25f);
  const Packet k_mhalf = ei::pset1<Packet>(-0.5f);
  const Packet k_big = ei::pset1<Packet>(1e30f);
  for (int64_t j = 0; j < n; j += kPacket<float>) {
    const Packet xv = ei::ploadt<Packet, kAlign>(x + j);
    const Packet c = ei::pmin(ei::pmax(xv, lo), hi);
    const Packet t = ei::pdiv(one, ei::pmadd(ei::pabs(c), k_half_a, one));
    Packet p = ei::pset1<Packet>(kErfcP32[12]);
    for (int i = 11; i >= 0; --i) {
      p = ei::pmadd(p, t, ei::pset1<Packet>(kErfcP32[i]));
    }
    // 64 c rounded to an integer by adding and removing 1.5 * 2^23 (exact
    // steps: 64 c is exact and |64 c| <= 2560; pround needs SSE4.1).
    const Packet h = ei::pmul(
        ei::psub(ei::padd(ei::pmul(c, k64), k_round), k_round), k64_inv);
    const Packet e1 = ei::pexp(ei::pmul(ei::pmul(h, h), k_quarter));
    // e^s for |s| <= 0.3125 (|c - h| <= 1/128, |c + h| <= 80): Taylor to
    // degree 7, truncation below 2.3e-9 relative (cheaper than pexp).
    const Packet s =
        ei::pmul(ei::pmul(ei::psub(c, h), ei::padd(c, h)), k_mhalf);
    Packet e2 = ei::pset1<Packet>(1.0f / 5040.0f);
    e2 = ei::pmadd(e2, s, ei::pset1<Packet>(1.0f / 720.0f));
    e2 = ei::pmadd(e2, s, ei::pset1<Packet>(1.0f / 120.0f));
    e2 = ei::pmadd(e2, s, ei::pset1<Packet>(1.0f / 24.0f));
    e2 = ei::pmadd(e2, s, ei::pset1<Packet>(1.0f / 6.0f));
    e2 = ei::pmadd(e2, s, half);
    e2 = ei::pmadd(e2, s, one);
    e2 = ei::pmadd(e2, s, one);
    const Packet step = ei::pmin(ei::pmax(ei::pmul(c, k_big), zero), one);
    // t P(t) / 2 (1 - 2H) + c / sqrt(2 pi)
    const Packet k = ei::padd(
        ei::pmul(ei::pmul(ei::pmul(half, t), p),
                 ei::psub(one, ei::padd(step, step))),
        ei::pmul(c, k_pdf));
    const Packet g =
        ei::padd(step, ei::pmul(ei::pmul(ei::pmul(e1, k), e2), e1));
    const Packet out = ei::pmul(ei::ploadt<Packet, kAlign>(dy + j), g);
    ei::pstoret<float, Packet, kAlign>(
        dx + j, ei::pselect(ei::pcmp_eq(xv, xv), out, xv));
  }
}

void ErfBlockF32(const float* x, const float* dy, float* dx, int64_t,
                 int64_t padded) {
  ErfPackets<true>(x, dy, dx, padded);
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
    gelu_grad::ErfPackets<false>(x, dy, dx, full);
    gelu_grad::RunFloatRange(x + full, dy + full, dx + full, 0, n - full,
                             &gelu_grad::ErfBlockF32);
  }
}

}  // namespace CPU_EIGEN_EW_NS
}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GELU_GRAD_H_
