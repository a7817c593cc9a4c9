// OneHot: a new axis of size `depth` at `axis` of the output; position
// indices[...] along it holds on_value, the rest off_value, in the output
// dtype. Dispatches on the indices' dtype (int32, int64).
#include <cstdint>
#include <cstring>

#include "cast.h"
#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

template <typename I>
void OneHotKernel(dg::KernelContext& ctx) {
  const dg::TensorRef indices = ctx.input(0), y = ctx.output(0);
  const int64_t depth = ctx.i("depth");
  const int32_t nd = y.ndim();
  DG_CHECK(nd == indices.ndim() + 1, DG_INTERNAL, ctx.op_name(),
           ": output rank ", nd, " for indices of rank ", indices.ndim());
  const int64_t axis = NormAxis(ctx.i("axis"), nd);
  DG_CHECK(axis >= 0 && axis < nd, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": axis ", ctx.i("axis"), " out of range for output rank ", nd);
  DG_CHECK(y.dim(static_cast<int32_t>(axis)) == depth, DG_INTERNAL,
           ctx.op_name(), ": output has ", y.dim(static_cast<int32_t>(axis)),
           " entries along axis ", axis, ", depth is ", depth);
  const I* idx = indices.data<const I>();
  const int64_t m = indices.numel();
  for (int64_t t = 0; t < m; ++t) {
    const int64_t v = static_cast<int64_t>(idx[t]);
    if (v < 0 || v >= depth) {
      throw dg::Error(
          DG_OUT_OF_RANGE,
          dg::Str(ctx.op_name(), ": index ", v, " (at flat position ", t,
                  ") is outside [0, ", depth, ")"));
    }
  }
  if (y.numel() == 0) return;
  const size_t esize = dg::DTypeSize(y.dtype());
  alignas(8) char on[8] = {}, off[8] = {};
  StoreScalar(ctx.f("on_value"), y.dtype(), on);
  StoreScalar(ctx.f("off_value"), y.dtype(), off);
  char* dst = static_cast<char*>(y.raw_data());
  FillElements(dst, y.numel(), off, esize);
  // indices viewed as (outer, inner) around the new axis.
  int64_t inner = 1;
  for (int32_t k = static_cast<int32_t>(axis); k < indices.ndim(); ++k)
    inner *= indices.dim(k);
  DispatchElemSize(esize, [&](auto size) {
    constexpr size_t N = decltype(size)::value;
    ParallelFor(m, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t o = t / inner, r = t % inner;
        const int64_t pos =
            (o * depth + static_cast<int64_t>(idx[t])) * inner + r;
        CopyElem<N>(dst + pos * static_cast<int64_t>(N), on);
      }
    });
  });
}

DG_KERNEL("OneHot", "cpu", OneHotKernel, int32_t, int64_t);

}  // namespace
}  // namespace cpu_eigen
