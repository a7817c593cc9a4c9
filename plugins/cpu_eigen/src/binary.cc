// Element-wise arithmetic with NumPy broadcasting: y = f(a, b), same dtype
// (docs/ops.md, "Elementwise, binary"). The ops themselves are in
// elementwise_ops.h; comparisons are in compare.cc.
#include <cstdint>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"

namespace cpu_eigen {
namespace {

using elementwise::kCostCheap;
using elementwise::kCostDivide;
using elementwise::kCostHeavy;
using elementwise::RunBinaryOp;
using namespace ew_base;  // NOLINT(build/namespaces): the op functors

// Defines kernel NAME<T> running OP (KIND in the float builds) and
// registers it for the dtypes that follow. Output 0 may overwrite input 0:
// then input 0 has the output's shape and each element is read before it
// is written.
#define CPU_EIGEN_BINARY(NAME, KIND, OP, COST, ...)                     \
  template <typename T>                                                \
  void NAME(dg::KernelContext& ctx) {                                  \
    RunBinaryOp<T>(ctx, BinaryKind::KIND, OP{}, (COST));               \
  }                                                                    \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, NAME, __VA_ARGS__)

CPU_EIGEN_BINARY(Add, kAdd, AddOp, kCostCheap, CPU_EIGEN_NUMERIC_TYPES);
CPU_EIGEN_BINARY(Sub, kSub, SubOp, kCostCheap, CPU_EIGEN_NUMERIC_TYPES);
CPU_EIGEN_BINARY(Mul, kMul, MulOp, kCostCheap, CPU_EIGEN_NUMERIC_TYPES);
CPU_EIGEN_BINARY(Maximum, kMaximum, MaximumOp, kCostCheap,
                 CPU_EIGEN_NUMERIC_TYPES);
CPU_EIGEN_BINARY(Minimum, kMinimum, MinimumOp, kCostCheap,
                 CPU_EIGEN_NUMERIC_TYPES);
CPU_EIGEN_BINARY(Div, kDiv, DivOp, kCostDivide, CPU_EIGEN_FLOAT_TYPES);

#undef CPU_EIGEN_BINARY

// pow(a, b); `x ** 2` (b a single 2) squares instead, which is exact.
template <typename T>
void Pow(dg::KernelContext& ctx) {
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  if (b.numel() == 1 && a.numel() == y.numel() && y.numel() > 0 &&
      *b.data<const T>() == T(2)) {
    RunBinaryOp<T>(ctx, BinaryKind::kSquareA, SquareAOp{}, kCostCheap);
  } else {
    RunBinaryOp<T>(ctx, BinaryKind::kPow, PowOp{}, kCostHeavy);
  }
}
DG_KERNEL_EX("Pow", "cpu", 0, DG_KERNEL_INPLACE, Pow, CPU_EIGEN_FLOAT_TYPES);

}  // namespace
}  // namespace cpu_eigen
