// Division and remainder kernels (FloorDivide, TruncDivide, Mod, Fmod) and
// integer Pow, with NumPy broadcasting (docs/ops.md, "Division and
// remainder"). Integer division never traps: a zero divisor gives 0, and
// MIN / -1 wraps to MIN (remainder 0), as NumPy gives (without its warning).
// Floats follow NumPy's divmod (floor_divide, remainder) and C (fmod).
// 16-bit floats compute in float and round once (widen.h).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

using elementwise::kCostDivide;
using elementwise::kCostHeavy;
using widen::RunBinaryScalar;

// The functors (FloorDivideOp, TruncDivideOp, ModOp, FmodOp) live in
// elementwise_ops.h, shared with the fused kernel (fused.cc).
using ew_base::FloorDivideOp;
using ew_base::FmodOp;
using ew_base::ModOp;
using ew_base::TruncDivideOp;

#define CPU_EIGEN_DIVISION(NAME, OP)                                          \
  template <typename T>                                                      \
  void NAME(dg::KernelContext& ctx) {                                        \
    RunBinaryScalar<T, T>(ctx, OP{}, OP{}, kCostDivide);                     \
  }                                                                          \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, NAME,                     \
               CPU_EIGEN_NUMERIC_TYPES, CPU_EIGEN_HALF_TYPES)

CPU_EIGEN_DIVISION(FloorDivide, FloorDivideOp);
CPU_EIGEN_DIVISION(TruncDivide, TruncDivideOp);
CPU_EIGEN_DIVISION(Mod, ModOp);
CPU_EIGEN_DIVISION(Fmod, FmodOp);

#undef CPU_EIGEN_DIVISION

// ------------------------------------------------------------ integer Pow

// a ** b by repeated squaring, wrapping on overflow (as NumPy's integer
// power). b is never negative here (checked before).
struct IntPowOp {
  template <typename T>
  T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    U e = static_cast<U>(b);
    T result = T(1), base = a;
    while (e != 0) {
      if (e & 1u) result = ew_base::WrapMul(result, base);
      e = static_cast<U>(e >> 1);
      if (e != 0) base = ew_base::WrapMul(base, base);
    }
    return result;
  }
};

// Integer Pow: NumPy raises for a negative exponent (an integer result
// cannot represent 2 ** -1), and so does this kernel, before computing.
template <typename T>
void IntPow(dg::KernelContext& ctx) {
  if constexpr (std::is_signed_v<T>) {
    const dg::TensorRef b = ctx.input(1);
    const T* pb = b.data<const T>();
    const int64_t n = b.numel();
    for (int64_t i = 0; i < n; ++i) {
      DG_CHECK(pb[i] >= T(0), DG_INVALID_ARGUMENT, ctx.op_name(),
               ": integers to negative integer powers are not allowed (exponent ",
               static_cast<int64_t>(pb[i]), " in a ", dg::DTypeName(b.dtype()),
               " tensor, as NumPy); cast the base to a float dtype first, e.g. "
               "x.astype('float64') ** b");
    }
  }
  RunBinaryScalar<T, T>(ctx, IntPowOp{}, IntPowOp{}, kCostHeavy);
}
DG_KERNEL_EX("Pow", "cpu", 0, DG_KERNEL_INPLACE, IntPow, CPU_EIGEN_INT_TYPES);

// 16-bit float Pow: pow in float, rounded once.
struct FloatPowOp {
  float operator()(float a, float b) const { return std::pow(a, b); }
};

template <typename T>
void HalfPow(dg::KernelContext& ctx) {
  RunBinaryScalar<T, T>(ctx, FloatPowOp{}, FloatPowOp{}, kCostHeavy);
}
DG_KERNEL_EX("Pow", "cpu", 0, DG_KERNEL_INPLACE, HalfPow, CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
