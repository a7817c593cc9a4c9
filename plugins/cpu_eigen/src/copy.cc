// Copies and view-like shape ops: Contiguous, Reshape, Squeeze, Unsqueeze,
// Flatten, BroadcastTo. They only move bytes, so one kernel (keyed by element
// size at run time) serves every dtype.
#include <cstdint>
#include <vector>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

// The one kernel that reads its input through arbitrary strides (including
// zero, negative and a byte offset): the core calls it to densify views
// before handing them to kernels that assume contiguous inputs.
void ContiguousKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.shape() == y.shape(), DG_INTERNAL, ctx.op_name(),
           ": output shape differs from the input's");
  StridedCopy(dg::DTypeSize(x.dtype()), x.ndim(), x.raw()->shape, x.raw_data(),
              x.raw()->strides, y.raw_data(), y.raw()->strides);
}

// Reshape, Squeeze, Unsqueeze, Flatten: same elements in the same order.
void CopyKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": input has ",
           x.numel(), " elements, output ", y.numel());
  ParallelMemcpy(y.raw_data(), x.raw_data(),
                 static_cast<size_t>(x.numel()) * dg::DTypeSize(x.dtype()));
}

// NumPy broadcast_to: align shapes on the right; a broadcast dim reads with
// stride 0.
void BroadcastToKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t xn = x.ndim(), yn = y.ndim();
  DG_CHECK(xn <= yn, DG_INTERNAL, ctx.op_name(), ": input rank ", xn,
           " exceeds output rank ", yn);
  const std::vector<int64_t> xs = ContiguousStrides(x.shape());
  std::vector<int64_t> strides(static_cast<size_t>(yn), 0);
  for (int32_t k = 0; k < yn; ++k) {
    const int32_t i = k - (yn - xn);
    if (i < 0) continue;
    if (x.dim(i) == y.dim(k)) {
      strides[k] = xs[i];
    } else {
      DG_CHECK(x.dim(i) == 1, DG_INTERNAL, ctx.op_name(), ": dim ", i,
               " of size ", x.dim(i), " cannot broadcast to ", y.dim(k));
    }
  }
  StridedToDense(dg::DTypeSize(x.dtype()), yn, y.raw()->shape, x.raw_data(),
                 strides.data(), y.raw_data());
}

DG_KERNEL_MASK("Contiguous", "cpu", dg::kAny, 0, DG_KERNEL_STRIDED_INPUTS,
               ContiguousKernel);
DG_KERNEL_MASK("Reshape", "cpu", dg::kAny, 0, 0, CopyKernel);
DG_KERNEL_MASK("Squeeze", "cpu", dg::kAny, 0, 0, CopyKernel);
DG_KERNEL_MASK("Unsqueeze", "cpu", dg::kAny, 0, 0, CopyKernel);
DG_KERNEL_MASK("Flatten", "cpu", dg::kAny, 0, 0, CopyKernel);
DG_KERNEL_MASK("BroadcastTo", "cpu", dg::kAny, 0, 0, BroadcastToKernel);

}  // namespace
}  // namespace cpu_eigen
