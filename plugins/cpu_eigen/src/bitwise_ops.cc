// Bitwise kernels with NumPy broadcasting (docs/ops.md, "Bitwise"):
// and/or/xor/not on integers and bool, shifts on integers. Shift counts
// outside [0, bits) never reach the C++ shift (undefined behaviour there):
// left gives 0, right gives 0 or -1 (sign fill), as NumPy.
#include <climits>
#include <cstdint>
#include <type_traits>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

using elementwise::FunctorBinaryRun;
using elementwise::FunctorUnaryRun;
using elementwise::kCostCheap;
using elementwise::RunBinary;
using elementwise::RunUnary;

struct AndOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else return static_cast<T>(a & b);
  }
};
struct OrOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else return static_cast<T>(a | b);
  }
};
struct XorOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a != b;
    else return static_cast<T>(a ^ b);
  }
};
struct NotOp {
  template <typename T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;
    else return static_cast<T>(~x);
  }
};

template <typename T>
constexpr int kBits = static_cast<int>(sizeof(T) * CHAR_BIT);

// True when 0 <= b < bits (b may be negative for signed types).
template <typename T>
inline bool InRange(T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0)) return false;
  }
  return static_cast<uint64_t>(b) < static_cast<uint64_t>(kBits<T>);
}

struct LeftShiftOp {
  template <typename T>
  T operator()(T a, T b) const {
    if (!InRange(b)) return T(0);
    using U = std::make_unsigned_t<T>;
    // In the unsigned type (a negative a shifted is undefined before C++20),
    // wide enough that uint8/int8 do not promote to signed int first.
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<W>(static_cast<U>(a)) << static_cast<int>(b));
  }
};

struct RightShiftOp {
  template <typename T>
  T operator()(T a, T b) const {
    if (!InRange(b)) {
      if constexpr (std::is_signed_v<T>) return a < T(0) ? T(-1) : T(0);
      else return T(0);
    }
    return static_cast<T>(a >> static_cast<int>(b));  // arithmetic for signed (gcc, C++20)
  }
};

#define CPU_EIGEN_BITWISE(NAME, OP, ...)                                     \
  template <typename T>                                                     \
  void NAME(dg::KernelContext& ctx) {                                       \
    const OP op{};                                                          \
    RunBinary<T, T>(ctx, &FunctorBinaryRun<T, T, OP>, &op, kCostCheap);     \
  }                                                                         \
  DG_KERNEL_EX(#NAME, "cpu", 0, DG_KERNEL_INPLACE, NAME, __VA_ARGS__)

CPU_EIGEN_BITWISE(BitwiseAnd, AndOp, bool, CPU_EIGEN_INT_TYPES);
CPU_EIGEN_BITWISE(BitwiseOr, OrOp, bool, CPU_EIGEN_INT_TYPES);
CPU_EIGEN_BITWISE(BitwiseXor, XorOp, bool, CPU_EIGEN_INT_TYPES);
CPU_EIGEN_BITWISE(LeftShift, LeftShiftOp, CPU_EIGEN_INT_TYPES);
CPU_EIGEN_BITWISE(RightShift, RightShiftOp, CPU_EIGEN_INT_TYPES);

#undef CPU_EIGEN_BITWISE

template <typename T>
void BitwiseNot(dg::KernelContext& ctx) {
  const NotOp op{};
  RunUnary<T, T>(ctx, &FunctorUnaryRun<T, T, NotOp>, &op, kCostCheap);
}
DG_KERNEL_EX("BitwiseNot", "cpu", 0, DG_KERNEL_INPLACE, BitwiseNot, bool,
             CPU_EIGEN_INT_TYPES);

// ------------------------------------------------ bool Maximum / Minimum

// max(a, b) on bool is a or b, min(a, b) is a and b (NumPy's values).
template <typename T>
void BoolMaximum(dg::KernelContext& ctx) {
  const OrOp op{};
  RunBinary<T, T>(ctx, &FunctorBinaryRun<T, T, OrOp>, &op, kCostCheap);
}
DG_KERNEL_EX("Maximum", "cpu", 0, DG_KERNEL_INPLACE, BoolMaximum, bool);

template <typename T>
void BoolMinimum(dg::KernelContext& ctx) {
  const AndOp op{};
  RunBinary<T, T>(ctx, &FunctorBinaryRun<T, T, AndOp>, &op, kCostCheap);
}
DG_KERNEL_EX("Minimum", "cpu", 0, DG_KERNEL_INPLACE, BoolMinimum, bool);

}  // namespace
}  // namespace cpu_eigen
