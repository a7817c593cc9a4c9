// Cast: any of the ten dtypes to any other. One kernel per input dtype; it
// switches on the output dtype. Conversion rules are in cast.h.
#include "cast.h"

#include <cstdint>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

template <typename In, typename Out>
void CastLoop(const In* x, Out* y, int64_t n) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = Convert<Out>(x[i]);
  });
}

template <typename In>
void CastKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": input has ",
           x.numel(), " elements, output ", y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  const In* px = x.data<const In>();
  if (y.dtype() == x.dtype()) {
    ParallelMemcpy(y.raw_data(), px, static_cast<size_t>(n) * sizeof(In));
    return;
  }
  DispatchDType(y.dtype(), [&](auto tag) {
    using Out = decltype(tag);
    CastLoop(px, y.data<Out>(), n);
  });
}

DG_KERNEL("Cast", "cpu", CastKernel, bool, uint8_t, int8_t, int16_t, int32_t,
          int64_t, Eigen::half, Eigen::bfloat16, float, double);

}  // namespace
}  // namespace cpu_eigen
