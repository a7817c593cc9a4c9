// Creation ops (no inputs; they dispatch on the output's dtype): Fill and
// Arange. Values are computed in double and converted by cast.h's rules.
#include <cstdint>
#include <cstring>

#include "cast.h"
#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

// Every element = value converted to the output dtype.
void FillKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  alignas(8) char value[8] = {};
  if (ctx.has("int_value")) {  // exact: shape inference checked the range
    const int64_t v = ctx.i("int_value");
    DispatchDType(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T t = static_cast<T>(v);
      std::memcpy(value, &t, sizeof(T));
    });
  } else {
    StoreScalar(ctx.f("value"), y.dtype(), value);
  }
  FillElements(y.raw_data(), y.numel(), value, dg::DTypeSize(y.dtype()));
}

// y[i] = start + i * step, computed in double, then converted. The length
// comes from shape inference (NumPy's ceil((stop - start) / step)).
template <typename T>
void ArangeKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const double start = ctx.f("start"), step = ctx.f("step");
  DG_CHECK(step != 0.0, DG_INVALID_ARGUMENT, ctx.op_name(), ": step is 0");
  T* py = y.data<T>();
  ParallelFor(y.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      py[i] = Convert<T>(start + static_cast<double>(i) * step);
  });
}

DG_KERNEL_MASK("Fill", "cpu", dg::kAny, 0, 0, FillKernel);
DG_KERNEL("Arange", "cpu", ArangeKernel, uint8_t, int8_t, int16_t, int32_t,
          int64_t, Eigen::half, Eigen::bfloat16, float, double, uint16_t,
          uint32_t, uint64_t);

}  // namespace
}  // namespace cpu_eigen
