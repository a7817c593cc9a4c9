// Slice: per axis exactly Python's slice(start, stop, step), negative steps
// included. The selection is a strided view of the input (start offset,
// stride * step per axis), copied densely by StridedCopy.
#include <cstdint>
#include <limits>
#include <vector>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

struct AxisSlice {
  int64_t start, step, count;
};

// Python's slice.indices() followed by the length computation, as CPython's
// PySlice_AdjustIndices does it: out-of-range bounds are clamped, and
// INT64_MAX / INT64_MIN act as "to the end" in either direction.
AxisSlice AdjustSlice(int64_t start, int64_t stop, int64_t step, int64_t len) {
  if (step < -std::numeric_limits<int64_t>::max()) {
    step = -std::numeric_limits<int64_t>::max();  // so that -step exists
  }
  if (start < 0) {
    start += len;
    if (start < 0) start = step < 0 ? -1 : 0;
  } else if (start >= len) {
    start = step < 0 ? len - 1 : len;
  }
  if (stop < 0) {
    stop += len;
    if (stop < 0) stop = step < 0 ? -1 : 0;
  } else if (stop >= len) {
    stop = step < 0 ? len - 1 : len;
  }
  int64_t count = 0;
  if (step < 0) {
    if (stop < start) count = (start - stop - 1) / (-step) + 1;
  } else if (start < stop) {
    count = (stop - start - 1) / step + 1;
  }
  return {start, step, count};
}

void SliceKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  const std::vector<int64_t> starts = ctx.ints("starts");
  const std::vector<int64_t> ends = ctx.ints("ends");
  const std::vector<int64_t> steps = ctx.ints("steps");
  const size_t k = starts.size();
  DG_CHECK(ends.size() == k && steps.size() == k, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": starts, ends and steps differ in length (", k,
           ", ", ends.size(), ", ", steps.size(), ")");
  std::vector<int64_t> axes;
  if (ctx.has("axes")) {
    axes = ctx.ints("axes");
    DG_CHECK(axes.size() == k, DG_INVALID_ARGUMENT, ctx.op_name(), ": ",
             axes.size(), " axes for ", k, " starts");
  } else {
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  DG_CHECK(y.ndim() == nd, DG_INTERNAL, ctx.op_name(),
           ": output rank differs from the input's");

  const std::vector<int64_t> xs = ContiguousStrides(x.shape());
  std::vector<int64_t> strides = xs;
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  int64_t offset = 0;  // elements from x's first element
  for (size_t i = 0; i < k; ++i) {
    const int64_t a = NormAxis(axes[i], nd);
    DG_CHECK(a >= 0 && a < nd, DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ",
             axes[i], " out of range for rank ", nd);
    DG_CHECK(!seen[a], DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", axes[i],
             " given twice");
    seen[a] = true;
    DG_CHECK(steps[i] != 0, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": step is 0 on axis ", axes[i]);
    const int32_t ai = static_cast<int32_t>(a);
    const AxisSlice s = AdjustSlice(starts[i], ends[i], steps[i], x.dim(ai));
    DG_CHECK(s.count == y.dim(ai), DG_INTERNAL, ctx.op_name(), ": axis ", a,
             " selects ", s.count, " elements, output has ", y.dim(ai));
    if (s.count == 0) return;  // empty output; the start may lie outside x
    offset += s.start * xs[a];
    // A single selected element needs no stride (and step may be huge).
    strides[a] = s.count == 1 ? xs[a] : xs[a] * s.step;
  }
  for (int32_t a = 0; a < nd; ++a) {
    DG_CHECK(seen[a] || y.dim(a) == x.dim(a), DG_INTERNAL, ctx.op_name(),
             ": unsliced axis ", a, " changed size");
  }
  if (y.numel() == 0) return;
  const size_t esize = dg::DTypeSize(x.dtype());
  const char* base = static_cast<const char*>(x.raw_data()) +
                     offset * static_cast<int64_t>(esize);
  StridedToDense(esize, nd, y.raw()->shape, base, strides.data(), y.raw_data());
}

DG_KERNEL_MASK("Slice", "cpu", dg::kAny, 0, 0, SliceKernel);

}  // namespace
}  // namespace cpu_eigen
