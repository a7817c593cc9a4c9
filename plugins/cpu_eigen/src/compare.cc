// Comparisons and logical ops; every output is bool (docs/ops.md).
// Binary ones broadcast as NumPy; "true" for logical ops means non-zero
// (NaN is true, as in NumPy).
#include <cstdint>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"

namespace cpu_eigen {
namespace {

using elementwise::FunctorBinaryRun;
using elementwise::FunctorUnaryRun;
using elementwise::kCostCheap;
using elementwise::RunBinary;
using elementwise::RunUnary;

struct EqualOp {
  template <typename T>
  bool operator()(T a, T b) const { return a == b; }
};
struct NotEqualOp {
  template <typename T>
  bool operator()(T a, T b) const { return a != b; }
};
struct LessOp {
  template <typename T>
  bool operator()(T a, T b) const { return a < b; }
};
struct LessEqualOp {
  template <typename T>
  bool operator()(T a, T b) const { return a <= b; }
};
struct GreaterOp {
  template <typename T>
  bool operator()(T a, T b) const { return a > b; }
};
struct GreaterEqualOp {
  template <typename T>
  bool operator()(T a, T b) const { return a >= b; }
};
struct LogicalAndOp {
  template <typename T>
  bool operator()(T a, T b) const { return a != T(0) && b != T(0); }
};
struct LogicalOrOp {
  template <typename T>
  bool operator()(T a, T b) const { return a != T(0) || b != T(0); }
};

// Defines kernel NAME<T> (T -> bool) running FUNCTOR and registers it for
// every dtype.
#define CPU_EIGEN_COMPARE(NAME, FUNCTOR)                                \
  template <typename T>                                                \
  void NAME(dg::KernelContext& ctx) {                                  \
    const FUNCTOR op{};                                                \
    RunBinary<T, bool>(ctx, &FunctorBinaryRun<T, bool, FUNCTOR>, &op,  \
                       kCostCheap);                                    \
  }                                                                    \
  DG_KERNEL(#NAME, "cpu", NAME, CPU_EIGEN_ALL_TYPES)

CPU_EIGEN_COMPARE(Equal, EqualOp);
CPU_EIGEN_COMPARE(NotEqual, NotEqualOp);
CPU_EIGEN_COMPARE(Less, LessOp);
CPU_EIGEN_COMPARE(LessEqual, LessEqualOp);
CPU_EIGEN_COMPARE(Greater, GreaterOp);
CPU_EIGEN_COMPARE(GreaterEqual, GreaterEqualOp);
CPU_EIGEN_COMPARE(LogicalAnd, LogicalAndOp);
CPU_EIGEN_COMPARE(LogicalOr, LogicalOrOp);

#undef CPU_EIGEN_COMPARE

// x == 0, as bool.
struct LogicalNotOp {
  template <typename T>
  bool operator()(T x) const { return x == T(0); }
};

template <typename T>
void LogicalNot(dg::KernelContext& ctx) {
  const LogicalNotOp op{};
  RunUnary<T, bool>(ctx, &FunctorUnaryRun<T, bool, LogicalNotOp>, &op,
                    kCostCheap);
}
DG_KERNEL("LogicalNot", "cpu", LogicalNot, CPU_EIGEN_ALL_TYPES);

}  // namespace
}  // namespace cpu_eigen
