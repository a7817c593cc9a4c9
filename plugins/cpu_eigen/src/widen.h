// 16-bit float (float16, bfloat16) element-wise kernels computed in float:
// each element is widened to float, the op's float scalar form runs, and the
// result is rounded once to the 16-bit type (nearest, ties to even). So a
// float16 result is the float32 result correctly rounded, never the
// accumulation of per-step 16-bit roundings.
//
// Used by the kernels of int_arith.cc, bitwise_ops.cc, unary_math.cc and
// half_elementwise.cc with the elementwise.h loops (broadcasting, threads).
#ifndef DRAGON_CPU_EIGEN_WIDEN_H_
#define DRAGON_CPU_EIGEN_WIDEN_H_

#include <cstdint>
#include <type_traits>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"

// Dtype lists for registrations.
#define CPU_EIGEN_HALF_TYPES Eigen::half, Eigen::bfloat16
#define CPU_EIGEN_INT_TYPES \
  int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

namespace cpu_eigen {
namespace widen {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Eigen::half> ||
                         std::is_same_v<T, Eigen::bfloat16>;

// f(float(x)) rounded to H; Out is H, or bool for predicates.
template <typename F, typename H, typename Out = H>
struct Unary {
  F f;
  Out operator()(H x) const {
    return static_cast<Out>(f(static_cast<float>(x)));
  }
};

template <typename F, typename H, typename Out = H>
struct Binary {
  F f;
  Out operator()(H a, H b) const {
    return static_cast<Out>(f(static_cast<float>(a), static_cast<float>(b)));
  }
};

// y = f(x) with F's scalar form; 16-bit floats through float. FT is F's
// float instance for functors templated on their type (pass F again for
// functors with a templated operator()).
template <typename T, typename Out, typename F, typename FT = F>
void RunUnaryScalar(dg::KernelContext& ctx, const FT& float_op, const F& op,
                    int64_t cost) {
  if constexpr (kIsHalf<T>) {
    (void)op;
    const Unary<FT, T, Out> w{float_op};
    elementwise::RunUnary<T, Out>(
        ctx, &elementwise::FunctorUnaryRun<T, Out, Unary<FT, T, Out>>, &w,
        cost);
  } else {
    (void)float_op;
    elementwise::RunUnary<T, Out>(
        ctx, &elementwise::FunctorUnaryRun<T, Out, F>, &op, cost);
  }
}

template <typename T, typename Out, typename F, typename FT = F>
void RunBinaryScalar(dg::KernelContext& ctx, const FT& float_op, const F& op,
                     int64_t cost) {
  if constexpr (kIsHalf<T>) {
    (void)op;
    const Binary<FT, T, Out> w{float_op};
    elementwise::RunBinary<T, Out>(
        ctx, &elementwise::FunctorBinaryRun<T, Out, Binary<FT, T, Out>>, &w,
        cost);
  } else {
    (void)float_op;
    elementwise::RunBinary<T, Out>(
        ctx, &elementwise::FunctorBinaryRun<T, Out, F>, &op, cost);
  }
}

}  // namespace widen
}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_WIDEN_H_
