// Element-wise unary kernels: y = f(x), same shape and dtype
// (docs/ops.md, "Elementwise, unary"). The ops themselves are in
// elementwise_ops.h; LogicalNot (bool output) is in compare.cc.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common.h"
#include "dragon/elementwise.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"

namespace cpu_eigen {
namespace {

using elementwise::ForRange;
using elementwise::kCostCheap;
using elementwise::kCostDivide;
using elementwise::kCostHeavy;
using elementwise::kCostTranscendental;
using elementwise::RunUnaryOp;
using namespace ew_base;  // NOLINT(build/namespaces): the op functors

// Defines kernel NAME<T> running OP<T> (KIND in the float builds) and
// registers it for the dtypes that follow. Output 0 may overwrite input 0
// (each element is read before it is written).
#define CPU_EIGEN_UNARY(NAME, KIND, OP, COST, ...)                      \
  template <typename T>                                                \
  void NAME(dg::KernelContext& ctx) {                                  \
    RunUnaryOp<T>(ctx, UnaryKind::KIND, OP<T>{}, UnaryParams<T>{},     \
                  (COST));                                             \
  }                                                                    \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, NAME, __VA_ARGS__)

// One kernel per row of the element-wise op table (dragon/elementwise.h)
// whose Kernel column is numeric or float; libm rows are registered in
// unary_math.cc, custom ones below.
#define CPU_EIGEN_UNARY_numeric(Kind, Cost) \
  CPU_EIGEN_UNARY(Kind, k##Kind, Kind##Op, kCost##Cost, CPU_EIGEN_NUMERIC_TYPES);
#define CPU_EIGEN_UNARY_float(Kind, Cost) \
  CPU_EIGEN_UNARY(Kind, k##Kind, Kind##Op, kCost##Cost, CPU_EIGEN_FLOAT_TYPES);
#define CPU_EIGEN_UNARY_libm(Kind, Cost)
#define CPU_EIGEN_UNARY_custom0(Kind, Cost)
#define CPU_EIGEN_UNARY_custom1(Kind, Cost)
#define CPU_EIGEN_UNARY_custom2(Kind, Cost)
#define CPU_EIGEN_UNARY_ROW_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  CPU_EIGEN_UNARY_##Kernel(Kind, Cost)
DG_ELEMENTWISE_UNARY(CPU_EIGEN_UNARY_ROW_)
#undef CPU_EIGEN_UNARY_ROW_
#undef CPU_EIGEN_UNARY_numeric
#undef CPU_EIGEN_UNARY_float
#undef CPU_EIGEN_UNARY_libm
#undef CPU_EIGEN_UNARY_custom0
#undef CPU_EIGEN_UNARY_custom1
#undef CPU_EIGEN_UNARY_custom2

#undef CPU_EIGEN_UNARY

// ------------------------------------------------ ops with attributes

template <typename T>
void LeakyRelu(dg::KernelContext& ctx) {
  const T alpha = static_cast<T>(ctx.f("alpha"));
  RunUnaryOp<T>(ctx, UnaryKind::kLeakyRelu, LeakyReluOp<T>{alpha},
                UnaryParams<T>{alpha, T(0)}, kCostCheap);
}
DG_KERNEL_EX("LeakyRelu", "cpu", 0, DG_KERNEL_INPLACE, LeakyRelu,
             CPU_EIGEN_FLOAT_TYPES);

template <typename T>
void Elu(dg::KernelContext& ctx) {
  const T alpha = static_cast<T>(ctx.f("alpha"));
  RunUnaryOp<T>(ctx, UnaryKind::kElu, EluOp<T>{alpha},
                UnaryParams<T>{alpha, T(0)}, kCostTranscendental);
}
DG_KERNEL_EX("Elu", "cpu", 0, DG_KERNEL_INPLACE, Elu, CPU_EIGEN_FLOAT_TYPES);

// Gelu: float32's exact form is gelu::ErfPackets (elementwise_ops.h, one
// branch-free packet formula shared with GeluGrad, every ISA build; about
// 0.5 ns an element on one AVX-512 core, faster than torch's gelu and
// oneDNN's gelu_erf: mkldnn's float32 Gelu is registered below priority 0
// since, docs/benchmarks.md). Its cost class is an exp's.
template <typename T>
void Gelu(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           ctx.op_name(), ": approximate must be \"none\" or \"tanh\", got \"",
           mode, "\"");
  if (mode == "tanh") {
    RunUnaryOp<T>(ctx, UnaryKind::kGeluTanh, GeluTanhOp<T>{},
                  UnaryParams<T>{}, kCostTranscendental);
  } else {
    RunUnaryOp<T>(ctx, UnaryKind::kGeluErf, GeluErfOp<T>{}, UnaryParams<T>{},
                  std::is_same_v<T, float> ? kCostTranscendental : kCostHeavy);
  }
}
DG_KERNEL_EX("Gelu", "cpu", 0, DG_KERNEL_INPLACE, Gelu, CPU_EIGEN_FLOAT_TYPES);

template <typename T>
void Softplus(dg::KernelContext& ctx) {
  const T beta = static_cast<T>(ctx.f("beta"));
  const T threshold = static_cast<T>(ctx.f("threshold"));
  RunUnaryOp<T>(ctx, UnaryKind::kSoftplus, SoftplusOp<T>{beta, threshold},
                UnaryParams<T>{beta, threshold}, kCostHeavy);
}
DG_KERNEL_EX("Softplus", "cpu", 0, DG_KERNEL_INPLACE, Softplus,
             CPU_EIGEN_FLOAT_TYPES);

// A Clip bound cast to T: floats as C++ does, integers saturating (a bound
// beyond the type's range clips nothing rather than wrapping); an unset
// bound is the type's extreme (±inf for floats).
template <typename T>
T ClipBound(const dg::KernelContext& ctx, const char* name, bool upper) {
  using Limits = std::numeric_limits<T>;
  if (!ctx.has(name)) {
    if constexpr (Limits::has_infinity) {
      return upper ? Limits::infinity() : -Limits::infinity();
    } else {
      return upper ? Limits::max() : Limits::lowest();
    }
  }
  const double v = ctx.f(name);
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    DG_CHECK(!std::isnan(v), DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name,
             " is NaN, which has no ", dg::DTypeName(dg::DTypeOf<T>::value),
             " value");
    if (v <= static_cast<double>(Limits::lowest())) return Limits::lowest();
    if (v >= static_cast<double>(Limits::max())) return Limits::max();
    return static_cast<T>(v);
  }
}

template <typename T>
void Clip(dg::KernelContext& ctx) {
  const T lo = ClipBound<T>(ctx, "min", false);
  const T hi = ClipBound<T>(ctx, "max", true);
  RunUnaryOp<T>(ctx, UnaryKind::kClip, ClipOp<T>{lo, hi},
                UnaryParams<T>{lo, hi}, kCostCheap);
}
DG_KERNEL_EX("Clip", "cpu", 0, DG_KERNEL_INPLACE, Clip,
             CPU_EIGEN_NUMERIC_TYPES);

// ------------------------------------------------------- Relu's backward

// The unsigned integer of T's size: the select is a bit mask.
template <size_t N> struct MaskBits;
template <> struct MaskBits<2> { using type = uint16_t; };
template <> struct MaskBits<4> { using type = uint32_t; };
template <> struct MaskBits<8> { using type = uint64_t; };

// dx[i] = x[i] <= 0 ? 0 : dy[i] as dy's bits AND a mask of ones where
// !(x[i] <= 0): a NaN x passes dy, as PyTorch's threshold_backward (the
// mask is "not at or below the threshold", not "above it"). Branch free,
// so it vectorises (a branch mispredicts half the time on a relu mask),
// and dy's value passes unchanged (NaN, -0) where it passes. dx may be dy
// itself.
template <typename T>
void ReluGradRange(const T* x, const T* dy, T* dx, int64_t n) {
  using U = typename MaskBits<sizeof(T)>::type;
  for (int64_t i = 0; i < n; ++i) {
    U g;
    std::memcpy(&g, dy + i, sizeof(U));
    bool pos;
    if constexpr (std::is_floating_point_v<T>) {
      pos = !(x[i] <= T(0));
    } else {  // float16 / bfloat16: compare in float
      pos = !(static_cast<float>(x[i]) <= 0.f);
    }
    const U r = g & (static_cast<U>(0) - static_cast<U>(pos));
    std::memcpy(static_cast<void*>(dx + i), &r, sizeof(U));
  }
}

template <typename T>
void ReluGrad(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dx = ctx.output(0);
  const int64_t n = dx.numel();
  if (n == 0) return;
  const T* px = x.data<const T>();
  const T* pdy = dy.data<const T>();
  T* pdx = dx.data<T>();
  ForRange(n, kCostCheap, [&](int64_t begin, int64_t end) {
    ReluGradRange<T>(px + begin, pdy + begin, pdx + begin, end - begin);
  });
}
DG_KERNEL_EX("ReluGrad", "cpu", 0, DG_KERNEL_INPLACE, ReluGrad,
             CPU_EIGEN_FLOAT_TYPES, Eigen::half, Eigen::bfloat16);

}  // namespace
}  // namespace cpu_eigen
