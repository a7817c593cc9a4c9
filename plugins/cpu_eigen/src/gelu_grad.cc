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
// float runs in whole packets (every element takes the packet path, so a
// result never depends on its position): the exact form's read in place, a
// tail shorter than a packet and the tanh form on aligned blocks padded to
// whole packets:
//   * exact form: one branch-free float formula for every x, shared with
//     Gelu's forward (elementwise_ops.h, gelu::ErfPackets): Phi(-|x|) =
//     erfc(|x|/sqrt 2) / 2 = e^(-x^2/2) t P(t), t = 1 / (1 + 0.38 |x| /
//     sqrt 2), P a degree-8 fit (relative error 2.2e-8), Phi(x) = that or
//     1 minus it (never 1 + erf(x/sqrt 2), which cancels for x < 0),
//     e^(-x^2/2) with x^2 split exactly so that its rounding is not
//     amplified, in a table-driven exp (AVX-512) or Cephes' polynomial.
//     Max error (tests/ops/test_gelu_grad.py, float64 reference over
//     [-10, 10], every ISA build): 9 ulp for x < -1, 4 ulp on [0, 1],
//     1 ulp above; on [-1, 0), where gelu' falls through 0 (x ~ -0.75) and
//     Phi(x) and x phi(x) cancel, 10 ulp or 1e-7 absolute. Issue 21: the
//     former x < -1 tail, gathered into double packets, made the kernel
//     2.2x slower than torch's gelu_backward on normal inputs (4.5x when
//     every x < -1); the shared formula is ~1.5x faster than the first
//     float version (docs/benchmarks.md).
//   * tanh form: with e = exp(-|v|) <= 1, p = 1 / (1 + e), q = e p, the
//     pair (s(v), s(-v)) is (p, q) for v >= 0 and (q, p) for v < 0: no
//     exp overflows and neither sigmoid loses its small tail to 1 - s.
// x is clamped to [-40, 40] (exact) / [-30, 30] (tanh), where gelu' is 0 or
// 1 to every dtype's precision, so x = +-inf gives 0 / 1 rather than
// inf * 0; a NaN x gives NaN.
// double: scalar erfc / exp per element. float16 / bfloat16: widened to
// float per block, the float path, rounded once (bfloat16 on the bits, in
// vectorised loops: bit for bit Eigen's conversions).
// The float / double runs are in gelu_grad.h, built per instruction set
// with the other element-wise runs (elementwise_isa.cc, FloatKernels).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

// Widening buffers: one block of 512 elements at a time.
constexpr int64_t kBlock = 512;

// bfloat16 <-> float on the bits, in loops the compiler vectorises
// (Eigen's conversions are per element): widening is exact (a shift);
// narrowing rounds to nearest, ties to even, and maps NaN to 0x7FC0 /
// 0xFFC0 by sign: exactly Eigen's float_to_bfloat16_rtne.
void WidenBf16(const Eigen::bfloat16* h, float* f, int64_t m) {
  const uint16_t* u = reinterpret_cast<const uint16_t*>(h);
  for (int64_t j = 0; j < m; ++j) {
    const uint32_t bits = static_cast<uint32_t>(u[j]) << 16;
    std::memcpy(f + j, &bits, sizeof(bits));
  }
}

void NarrowBf16(const float* f, Eigen::bfloat16* h, int64_t m) {
  uint16_t* u = reinterpret_cast<uint16_t*>(h);
  for (int64_t j = 0; j < m; ++j) {
    uint32_t bits;
    std::memcpy(&bits, f + j, sizeof(bits));
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t qnan = ((bits >> 16) & 0x8000u) | 0x7fc0u;
    u[j] = static_cast<uint16_t>(nan ? qnan : rounded);
  }
}

// Same, 16-bit inputs widened to float per block, the result rounded once.
template <typename H, typename Run>
void RunHalfRange(const H* x, const H* dy, H* dx, int64_t begin, int64_t end,
                  Run run) {
  alignas(64) float xb[kBlock];
  alignas(64) float db[kBlock];
  alignas(64) float ob[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t m = end - b < kBlock ? end - b : kBlock;
    if constexpr (std::is_same_v<H, Eigen::bfloat16>) {
      WidenBf16(x + b, xb, m);
      WidenBf16(dy + b, db, m);
      run(xb, db, ob, m);
      NarrowBf16(ob, dx + b, m);
    } else {
      for (int64_t j = 0; j < m; ++j) xb[j] = static_cast<float>(x[b + j]);
      for (int64_t j = 0; j < m; ++j) db[j] = static_cast<float>(dy[b + j]);
      run(xb, db, ob, m);
      for (int64_t j = 0; j < m; ++j) dx[b + j] = static_cast<H>(ob[j]);
    }
  }
}

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
  using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const auto run = elementwise::FloatKernelsFor<F>().gelu_grad;
  elementwise::ForRange(n, elementwise::kCostHeavy,
                        [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, F>) {
      run(tanh, px + begin, pdy + begin, pdx + begin, end - begin);
    } else {
      RunHalfRange(px, pdy, pdx, begin, end,
                   [&](const float* a, const float* b, float* c, int64_t m) {
                     run(tanh, a, b, c, m);
                   });
    }
  });
}

DG_KERNEL("GeluGrad", "cpu", GeluGrad, float, double, CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
