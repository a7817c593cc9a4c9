// BatchNormStatsUpdate on cuda (schema in dragon_core/src/ops/norm.cc), with
// the rule of cpu_eigen's kernel (plugins/cpu_eigen/src/bn_stats.cc): per
// element, in double, rounded once to the element type,
//   running_mean = (1 - m) * running_mean + m * batch_mean
//   running_var  = (1 - m) * running_var + m * batch_var * n / (n - 1).
// momentum and n are attributes (kernel arguments), so the update of a
// training-mode BatchNorm is one launch with no scalar operand to copy to
// the device (the element-wise form it replaces took ~6 ops and Python
// scalars per layer). Output 0 may be input 0's buffer and output 1 input
// 1's (each element is read before it is written).
#include <cstdint>

#include "bn_stats.h"
#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

template <typename T>
struct StatsArgs {
  const T *rm, *rv, *bm, *bv;
  T *rm_out, *rv_out;
};

// The rule is bn_stats.h's (explicit roundings: no FMA contraction, so the
// CPU kernel's bits).
template <typename T>
__global__ void BatchNormStatsKernel(StatsArgs<T> a, double m, double unbias, int64_t n) {
  DGC_LOOP(i, n) {
    const BnStatsValue v = BatchNormStatsStep(ToDouble(a.rm[i]), ToDouble(a.rv[i]),
                                              ToDouble(a.bm[i]), ToDouble(a.bv[i]), m, unbias);
    a.rm_out[i] = FromDouble<T>(v.mean);
    a.rv_out[i] = FromDouble<T>(v.var);
  }
}

template <typename T>
void BatchNormStatsUpdate(dg::KernelContext& ctx) {
  const double m = ctx.f("momentum");
  const int64_t count = ctx.i("count");
  const int64_t n = ctx.input(0).numel();
  for (int32_t i = 1; i < 4; ++i) {
    DG_CHECK(ctx.input(i).numel() == n, DG_INTERNAL, ctx.op_name(), ": input ", i, " has ",
             ctx.input(i).numel(), " elements, running_mean has ", n);
  }
  cudaStream_t s = Prepare(ctx);
  if (n == 0) return;
  StatsArgs<T> a{static_cast<const T*>(ctx.input(0).raw_data()),
                 static_cast<const T*>(ctx.input(1).raw_data()),
                 static_cast<const T*>(ctx.input(2).raw_data()),
                 static_cast<const T*>(ctx.input(3).raw_data()),
                 static_cast<T*>(ctx.output(0).raw_data()),
                 static_cast<T*>(ctx.output(1).raw_data())};
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  BatchNormStatsKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, m, unbias, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("BatchNormStatsUpdate", "cuda", 0, DG_KERNEL_INPLACE, BatchNormStatsUpdate, float,
             double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
