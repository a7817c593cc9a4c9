// Gather: y = x.take(indices, axis). Output shape
// x.shape[:axis] + indices.shape + x.shape[axis+1:]; each output row of
// prod(x.shape[axis+1:]) elements is one input row, so the copy is a memcpy
// per (outer, index) pair. Indices are int32 or int64; a negative index wraps
// once; anything else out of range is a DG_OUT_OF_RANGE error.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

template <typename I>
void GatherRows(const dg::KernelContext& ctx, const I* idx, int64_t axis,
                size_t esize) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t a = static_cast<int32_t>(axis);
  const int64_t n = x.dim(a);
  const int64_t m = ctx.input(1).numel();
  // Validate everything first: no exception may leave a parallel region.
  for (int64_t i = 0; i < m; ++i) {
    CheckIndex(ctx, static_cast<int64_t>(idx[i]), n, axis);
  }
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < a; ++k) outer *= x.dim(k);
  for (int32_t k = a + 1; k < x.ndim(); ++k) inner *= x.dim(k);
  DG_CHECK(y.numel() == outer * m * inner, DG_INTERNAL, ctx.op_name(),
           ": output has ", y.numel(), " elements, expected ",
           outer * m * inner);
  if (y.numel() == 0) return;
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  const int64_t row = inner * static_cast<int64_t>(esize);
  DispatchElemSize(esize, [&](auto size) {
    constexpr size_t N = decltype(size)::value;
    ParallelFor(
        outer * m,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t o = r / m;
            int64_t v = static_cast<int64_t>(idx[r % m]);
            if (v < 0) v += n;
            const char* s = src + (o * n + v) * row;
            if (inner == 1) {
              CopyElem<N>(dst + r * row, s);
            } else {
              std::memcpy(dst + r * row, s, static_cast<size_t>(row));
            }
          }
        },
        inner + 4);
  });
}

void GatherKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), indices = ctx.input(1);
  const int64_t axis = CheckedAxis(ctx, x);
  const size_t esize = dg::DTypeSize(x.dtype());
  DispatchIndexType(ctx, indices, "indices", [&](const auto* idx) {
    GatherRows(ctx, idx, axis, esize);
  });
}

DG_KERNEL_MASK("Gather", "cpu", dg::kAny, 0, 0, GatherKernel);

}  // namespace
}  // namespace cpu_eigen
