// ReluGrad on cuda (schema in dragon_core/src/ops/unary.cc), with the
// semantics of cpu_eigen's kernel (plugins/cpu_eigen/src/unary.cc): dx = dy
// where x > 0, else 0 (a NaN x gives 0; dy passes unchanged where x > 0).
// x and dy have one shape and are read through their strides; float16 and
// bfloat16 compare in float.
#include <cstdint>

#include "elementwise.cuh"
#include "ops.cuh"

namespace dragon_cuda {
namespace {

template <typename T>
struct ReluGradF {
  __device__ T operator()(T x, T dy) const {
    // Blocked where x <= 0 only: a NaN x passes dy (as the CPU kernel and
    // torch's threshold_backward).
    return static_cast<Acc<T>>(x) <= Acc<T>(0) ? static_cast<T>(Acc<T>(0)) : dy;
  }
};

template <typename T>
void ReluGrad(dg::KernelContext& ctx) {
  LaunchBinary<T, T, T>(ctx, ReluGradF<T>{});
}
DG_KERNEL_EX("ReluGrad", "cuda", 0, DG_KERNEL_STRIDED_INPUTS, ReluGrad, float, double,
             half, bf16);

}  // namespace
}  // namespace dragon_cuda
