// float16 and bfloat16 kernels of the standard element-wise ops (unary,
// binary arithmetic, comparisons, logical ops): each element is widened to
// float, the op's float scalar form (elementwise_ops.h, the same meaning as
// the float32 kernels) runs, and the result is rounded once (widen.h).
// Where's 16-bit kernels are in where.cc (a bit copy). The ops added with
// this file (int_arith.cc, unary_math.cc) register theirs beside their
// other dtypes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "common.h"
#include "dragon/elementwise.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

using elementwise::kCostCheap;
using elementwise::kCostTranscendental;
using widen::RunBinaryScalar;
using widen::RunUnaryScalar;
namespace ew = ew_base;

// ------------------------------------------------------------------ unary

#define CPU_EIGEN_HALF_UNARY(NAME, OP)                                        \
  template <typename T>                                                      \
  void Half##NAME(dg::KernelContext& ctx) {                                  \
    const ew::OP<float> op{};                                                \
    RunUnaryScalar<T, T>(ctx, op, op, kCostTranscendental);                  \
  }                                                                          \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, Half##NAME,               \
               CPU_EIGEN_HALF_TYPES)

// One kernel per row of the element-wise op table (dragon/elementwise.h)
// whose Kernel column is numeric or float (libm rows register their 16-bit
// kernels in unary_math.cc, custom ones below).
#define CPU_EIGEN_HALF_ROW_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  CPU_EIGEN_HALF_ROW_##Kernel(Kind)
#define CPU_EIGEN_HALF_ROW_numeric(Kind) CPU_EIGEN_HALF_UNARY(Kind, Kind##Op);
#define CPU_EIGEN_HALF_ROW_float(Kind) CPU_EIGEN_HALF_UNARY(Kind, Kind##Op);
#define CPU_EIGEN_HALF_ROW_libm(Kind)
#define CPU_EIGEN_HALF_ROW_custom0(Kind)
#define CPU_EIGEN_HALF_ROW_custom1(Kind)
#define CPU_EIGEN_HALF_ROW_custom2(Kind)
DG_ELEMENTWISE_UNARY(CPU_EIGEN_HALF_ROW_)
#undef CPU_EIGEN_HALF_ROW_
#undef CPU_EIGEN_HALF_ROW_numeric
#undef CPU_EIGEN_HALF_ROW_float
#undef CPU_EIGEN_HALF_ROW_libm
#undef CPU_EIGEN_HALF_ROW_custom0
#undef CPU_EIGEN_HALF_ROW_custom1
#undef CPU_EIGEN_HALF_ROW_custom2

#undef CPU_EIGEN_HALF_UNARY

template <typename T>
void HalfLeakyRelu(dg::KernelContext& ctx) {
  const ew::LeakyReluOp<float> op{static_cast<float>(ctx.f("alpha"))};
  RunUnaryScalar<T, T>(ctx, op, op, kCostCheap);
}
DG_KERNEL_EX("LeakyRelu", "cpu", 0, DG_KERNEL_INPLACE, HalfLeakyRelu,
             CPU_EIGEN_HALF_TYPES);

template <typename T>
void HalfElu(dg::KernelContext& ctx) {
  const ew::EluOp<float> op{static_cast<float>(ctx.f("alpha"))};
  RunUnaryScalar<T, T>(ctx, op, op, kCostTranscendental);
}
DG_KERNEL_EX("Elu", "cpu", 0, DG_KERNEL_INPLACE, HalfElu, CPU_EIGEN_HALF_TYPES);

// bfloat16 Gelu's exact form through float32's packet kernel
// (gelu::ErfPackets, elementwise_ops.h): widened per block, rounded once.
// It gives the scalar double form's bfloat16 for every finite bfloat16
// (all 65280 checked in tests/ops/test_gelu.py) at a fraction of its
// cost; float16 keeps the scalar form (4 of its values round differently).
void GeluErfBf16Run(const void*, const Eigen::bfloat16* x, Eigen::bfloat16* y,
                    int64_t n) {
  const auto& kernels = elementwise::FloatKernelsFor<float>();
  constexpr int64_t kChunk = 512;
  alignas(64) float buf[kChunk];
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t m = n - b < kChunk ? n - b : kChunk;
    for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<float>(x[b + j]);
    kernels.unary(UnaryKind::kGeluErf, UnaryParams<float>{}, buf, buf, m);
    for (int64_t j = 0; j < m; ++j) y[b + j] = static_cast<Eigen::bfloat16>(buf[j]);
  }
}

template <typename T>
void HalfGelu(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           ctx.op_name(), ": approximate must be \"none\" or \"tanh\", got \"",
           mode, "\"");
  if (mode == "tanh") {
    const ew::GeluTanhOp<float> op{};
    RunUnaryScalar<T, T>(ctx, op, op, kCostTranscendental);
  } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    elementwise::RunUnary<T, T>(ctx, &GeluErfBf16Run, nullptr,
                                kCostTranscendental);
  } else {
    const ew::GeluErfOp<float> op{};
    RunUnaryScalar<T, T>(ctx, op, op, kCostTranscendental);
  }
}
DG_KERNEL_EX("Gelu", "cpu", 0, DG_KERNEL_INPLACE, HalfGelu, CPU_EIGEN_HALF_TYPES);

template <typename T>
void HalfSoftplus(dg::KernelContext& ctx) {
  const ew::SoftplusOp<float> op{static_cast<float>(ctx.f("beta")),
                                 static_cast<float>(ctx.f("threshold"))};
  RunUnaryScalar<T, T>(ctx, op, op, kCostTranscendental);
}
DG_KERNEL_EX("Softplus", "cpu", 0, DG_KERNEL_INPLACE, HalfSoftplus,
             CPU_EIGEN_HALF_TYPES);

// Clip in float then one rounding equals clipping with the bounds rounded
// to T (rounding is monotonic); an unset bound is no bound.
template <typename T>
void HalfClip(dg::KernelContext& ctx) {
  const float inf = std::numeric_limits<float>::infinity();
  const float lo = ctx.has("min") ? static_cast<float>(ctx.f("min")) : -inf;
  const float hi = ctx.has("max") ? static_cast<float>(ctx.f("max")) : inf;
  const ew::ClipOp<float> op{lo, hi};
  RunUnaryScalar<T, T>(ctx, op, op, kCostCheap);
}
DG_KERNEL_EX("Clip", "cpu", 0, DG_KERNEL_INPLACE, HalfClip, CPU_EIGEN_HALF_TYPES);

// ----------------------------------------------------------------- binary

#define CPU_EIGEN_HALF_BINARY(NAME, OP, COST)                                 \
  template <typename T>                                                      \
  void Half##NAME(dg::KernelContext& ctx) {                                  \
    RunBinaryScalar<T, T>(ctx, ew::OP{}, ew::OP{}, (COST));                  \
  }                                                                          \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, Half##NAME,               \
               CPU_EIGEN_HALF_TYPES)

CPU_EIGEN_HALF_BINARY(Add, AddOp, kCostCheap);
CPU_EIGEN_HALF_BINARY(Sub, SubOp, kCostCheap);
CPU_EIGEN_HALF_BINARY(Mul, MulOp, kCostCheap);
CPU_EIGEN_HALF_BINARY(Div, DivOp, kCostCheap);
CPU_EIGEN_HALF_BINARY(Maximum, MaximumOp, kCostCheap);
CPU_EIGEN_HALF_BINARY(Minimum, MinimumOp, kCostCheap);

#undef CPU_EIGEN_HALF_BINARY

// ------------------------------------------------- comparisons, logical

struct EqualF {
  bool operator()(float a, float b) const { return a == b; }
};
struct NotEqualF {
  bool operator()(float a, float b) const { return a != b; }
};
struct LessF {
  bool operator()(float a, float b) const { return a < b; }
};
struct LessEqualF {
  bool operator()(float a, float b) const { return a <= b; }
};
struct GreaterF {
  bool operator()(float a, float b) const { return a > b; }
};
struct GreaterEqualF {
  bool operator()(float a, float b) const { return a >= b; }
};
struct LogicalAndF {
  bool operator()(float a, float b) const { return a != 0.0f && b != 0.0f; }
};
struct LogicalOrF {
  bool operator()(float a, float b) const { return a != 0.0f || b != 0.0f; }
};
struct LogicalNotF {
  bool operator()(float x) const { return x == 0.0f; }
};

#define CPU_EIGEN_HALF_COMPARE(NAME)                                          \
  template <typename T>                                                      \
  void Half##NAME(dg::KernelContext& ctx) {                                  \
    RunBinaryScalar<T, bool>(ctx, NAME##F{}, NAME##F{}, kCostCheap);         \
  }                                                                          \
  DG_KERNEL(#NAME, "cpu", Half##NAME, CPU_EIGEN_HALF_TYPES)

CPU_EIGEN_HALF_COMPARE(Equal);
CPU_EIGEN_HALF_COMPARE(NotEqual);
CPU_EIGEN_HALF_COMPARE(Less);
CPU_EIGEN_HALF_COMPARE(LessEqual);
CPU_EIGEN_HALF_COMPARE(Greater);
CPU_EIGEN_HALF_COMPARE(GreaterEqual);
CPU_EIGEN_HALF_COMPARE(LogicalAnd);
CPU_EIGEN_HALF_COMPARE(LogicalOr);

#undef CPU_EIGEN_HALF_COMPARE

template <typename T>
void HalfLogicalNot(dg::KernelContext& ctx) {
  RunUnaryScalar<T, bool>(ctx, LogicalNotF{}, LogicalNotF{}, kCostCheap);
}
DG_KERNEL("LogicalNot", "cpu", HalfLogicalNot, CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
