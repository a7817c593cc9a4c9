// Element-wise binary kernels on cuda with NumPy broadcasting and strided
// inputs, matching cpu_eigen (plugins/cpu_eigen/src/binary.cc, compare.cc):
// Add, Sub, Mul, Maximum, Minimum (integers wrap), Div, Pow, FloorDivide,
// TruncDivide, Mod, Fmod (integers never trap), and the
// comparisons and logical ops (bool output). 16-bit floats compute in float.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "elementwise.cuh"
#include "ops.cuh"

namespace dragon_cuda {
namespace {

using namespace fn;  // NOLINT: the op functors

constexpr uint32_t kStrided = DG_KERNEL_STRIDED_INPUTS;



template <typename T, typename F>
struct LiftBinary {
  F f;
  __device__ T operator()(T a, T b) const {
    return static_cast<T>(f(static_cast<Acc<T>>(a), static_cast<Acc<T>>(b)));
  }
};

#define DGC_BINARY(NAME, F, ...)                                       \
  template <typename T>                                               \
  void NAME(dg::KernelContext& ctx) {                                 \
    LaunchBinary<T, T, T>(ctx, LiftBinary<T, F>{F{}});                \
  }                                                                   \
  DG_KERNEL_EX(#NAME, "cuda", 0, kStrided, NAME, __VA_ARGS__)

#define DGC_NUMERIC float, double, half, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t
#define DGC_FLOATS float, double, half, bf16

DGC_BINARY(Add, AddF, DGC_NUMERIC);
DGC_BINARY(Sub, SubF, DGC_NUMERIC);
DGC_BINARY(Mul, MulF, DGC_NUMERIC);
DGC_BINARY(Maximum, MaximumF, DGC_NUMERIC);
DGC_BINARY(Minimum, MinimumF, DGC_NUMERIC);
DGC_BINARY(Div, DivF, DGC_FLOATS);
DGC_BINARY(Pow, PowF, DGC_FLOATS);
// Division and remainder (cpu_eigen's int_arith.cc): integers never trap.
DGC_BINARY(FloorDivide, FloorDivideF, DGC_NUMERIC);
DGC_BINARY(TruncDivide, TruncDivideF, DGC_NUMERIC);
DGC_BINARY(Mod, ModF, DGC_NUMERIC);
DGC_BINARY(Fmod, FmodF, DGC_NUMERIC);

#undef DGC_BINARY

// ------------------------------------------------------------ comparisons

#define DGC_CMP_FN(NAME, EXPR)                                  \
  struct NAME {                                                 \
    template <typename A>                                       \
    __device__ bool operator()(A a, A b) const { return EXPR; } \
  };
DGC_CMP_FN(EqualF, a == b)
DGC_CMP_FN(NotEqualF, a != b)
DGC_CMP_FN(LessF, a < b)
DGC_CMP_FN(LessEqualF, a <= b)
DGC_CMP_FN(GreaterF, a > b)
DGC_CMP_FN(GreaterEqualF, a >= b)
DGC_CMP_FN(LogicalAndF, a != A(0) && b != A(0))
DGC_CMP_FN(LogicalOrF, a != A(0) || b != A(0))
#undef DGC_CMP_FN

template <typename T, typename F>
struct LiftCompare {
  F f;
  __device__ bool operator()(T a, T b) const {
    return f(static_cast<Acc<T>>(a), static_cast<Acc<T>>(b));
  }
};

#define DGC_COMPARE(NAME, F)                                           \
  template <typename T>                                               \
  void NAME(dg::KernelContext& ctx) {                                 \
    LaunchBinary<T, T, bool>(ctx, LiftCompare<T, F>{F{}});            \
  }                                                                   \
  DG_KERNEL_EX(#NAME, "cuda", 0, kStrided, NAME, bool, DGC_NUMERIC)

DGC_COMPARE(Equal, EqualF);
DGC_COMPARE(NotEqual, NotEqualF);
DGC_COMPARE(Less, LessF);
DGC_COMPARE(LessEqual, LessEqualF);
DGC_COMPARE(Greater, GreaterF);
DGC_COMPARE(GreaterEqual, GreaterEqualF);
DGC_COMPARE(LogicalAnd, LogicalAndF);
DGC_COMPARE(LogicalOr, LogicalOrF);

#undef DGC_COMPARE


// ------------------------------------------------------------ bitwise

// BitwiseAnd/Or/Xor on bool and the integers, as cpu_eigen's bitwise_ops.cc
// (on bool they are the logical ops). Computed in T itself: no widening.
#define DGC_BITWISE(NAME, OP)                                          \
  struct NAME##F {                                                     \
    template <typename T>                                              \
    __device__ T operator()(T a, T b) const {                          \
      return static_cast<T>(a OP b);                                   \
    }                                                                  \
  };                                                                   \
  template <typename T>                                                \
  void NAME(dg::KernelContext& ctx) {                                  \
    LaunchBinary<T, T, T>(ctx, NAME##F{});                             \
  }                                                                    \
  DG_KERNEL_EX(#NAME, "cuda", 0, kStrided, NAME, bool, int8_t, int16_t, \
               int32_t, int64_t, uint8_t)

DGC_BITWISE(BitwiseAnd, &);
DGC_BITWISE(BitwiseOr, |);
DGC_BITWISE(BitwiseXor, ^);

#undef DGC_BITWISE

}  // namespace
}  // namespace dragon_cuda
