// Kernels of the float functions of dragon_core/src/ops/unary_math.cc:
// tan, the inverse trigonometric and (inverse) hyperbolic functions, erf,
// and the IsNan / IsInf / IsFinite predicates. Each element is the C
// library's (correctly rounded or within an ulp, and independent of its
// position in the tensor); 16-bit floats compute in float (widen.h).
#include <cmath>
#include <cstdint>
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
using widen::RunUnaryScalar;

// The functors (TanOp, ...) live in elementwise_ops.h, shared with the
// fused kernel (fused.cc).
#define CPU_EIGEN_MATH_FN(NAME)                                              \
  template <typename T>                                                     \
  void NAME(dg::KernelContext& ctx) {                                       \
    RunUnaryScalar<T, T>(ctx, ew_base::NAME##Op<float>{},                   \
                         ew_base::NAME##Op<T>{}, kCostTranscendental);      \
  }                                                                         \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, NAME,                    \
               CPU_EIGEN_FLOAT_TYPES, CPU_EIGEN_HALF_TYPES)

// One kernel per row of the element-wise op table (dragon/elementwise.h)
// whose Kernel column is libm.
#define CPU_EIGEN_MATH_ROW_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  CPU_EIGEN_MATH_ROW_##Kernel(Kind)
#define CPU_EIGEN_MATH_ROW_libm(Kind) CPU_EIGEN_MATH_FN(Kind);
#define CPU_EIGEN_MATH_ROW_numeric(Kind)
#define CPU_EIGEN_MATH_ROW_float(Kind)
#define CPU_EIGEN_MATH_ROW_custom0(Kind)
#define CPU_EIGEN_MATH_ROW_custom1(Kind)
#define CPU_EIGEN_MATH_ROW_custom2(Kind)
DG_ELEMENTWISE_UNARY(CPU_EIGEN_MATH_ROW_)
#undef CPU_EIGEN_MATH_ROW_
#undef CPU_EIGEN_MATH_ROW_libm
#undef CPU_EIGEN_MATH_ROW_numeric
#undef CPU_EIGEN_MATH_ROW_float
#undef CPU_EIGEN_MATH_ROW_custom0
#undef CPU_EIGEN_MATH_ROW_custom1
#undef CPU_EIGEN_MATH_ROW_custom2

#undef CPU_EIGEN_MATH_FN

// ------------------------------------------------------------ predicates

struct IsNanOp {
  template <typename T>
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    else return false;
  }
};
struct IsInfOp {
  template <typename T>
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    else return false;
  }
};
struct IsFiniteOp {
  template <typename T>
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isfinite(x);
    else return true;
  }
};

#define CPU_EIGEN_CLASSIFY(NAME, OP)                                         \
  template <typename T>                                                     \
  void NAME(dg::KernelContext& ctx) {                                       \
    RunUnaryScalar<T, bool>(ctx, OP{}, OP{}, kCostCheap);                   \
  }                                                                         \
  DG_KERNEL(#NAME, "cpu", NAME, CPU_EIGEN_NUMERIC_TYPES, CPU_EIGEN_HALF_TYPES)

CPU_EIGEN_CLASSIFY(IsNan, IsNanOp);
CPU_EIGEN_CLASSIFY(IsInf, IsInfOp);
CPU_EIGEN_CLASSIFY(IsFinite, IsFiniteOp);

#undef CPU_EIGEN_CLASSIFY

}  // namespace
}  // namespace cpu_eigen
