// BatchNormStatsUpdate (schema in dragon_core/src/ops/norm.cc): a
// training-mode BatchNorm's running-statistics update, per element,
// computed in double and rounded once to the element type:
//   running_mean = (1 - m) * running_mean + m * batch_mean
//   running_var  = (1 - m) * running_var + m * batch_var * n / (n - 1)
// The inputs are [C] vectors (a few hundred values): one thread. Output 0
// may be input 0's buffer and output 1 input 1's (each element is read
// before it is written).
#include <cstdint>

#include "common.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

template <typename T>
void BatchNormStatsUpdate(dg::KernelContext& ctx) {
  const double m = ctx.f("momentum");
  const int64_t count = ctx.i("count");
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  const int64_t c = ctx.input(0).numel();
  for (int32_t i = 1; i < 4; ++i) {
    DG_CHECK(ctx.input(i).numel() == c, DG_INTERNAL, ctx.op_name(), ": input ", i,
             " has ", ctx.input(i).numel(), " elements, running_mean has ", c);
  }
  const T* rm = ctx.input(0).data<const T>();
  const T* rv = ctx.input(1).data<const T>();
  const T* bm = ctx.input(2).data<const T>();
  const T* bv = ctx.input(3).data<const T>();
  T* rm_out = ctx.output(0).data<T>();
  T* rv_out = ctx.output(1).data<T>();
  for (int64_t j = 0; j < c; ++j) {
    const double mean = (1.0 - m) * static_cast<double>(rm[j]) + m * static_cast<double>(bm[j]);
    const double var =
        (1.0 - m) * static_cast<double>(rv[j]) + m * static_cast<double>(bv[j]) * unbias;
    rm_out[j] = static_cast<T>(mean);
    rv_out[j] = static_cast<T>(var);
  }
}

DG_KERNEL_EX("BatchNormStatsUpdate", "cpu", 0, DG_KERNEL_INPLACE, BatchNormStatsUpdate, float,
             double);
CPU_EIGEN_WIDENED_KERNEL("BatchNormStatsUpdate", BatchNormStatsUpdate);

}  // namespace
}  // namespace cpu_eigen
