// Transpose: y = x permuted by `perm` (unset = reversed axes), as a strided
// copy, so the tiled path of StridedCopy handles cache-unfriendly cases.
#include <cstdint>
#include <vector>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

void TransposeKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  std::vector<int64_t> perm;
  if (ctx.has("perm")) {
    perm = ctx.ints("perm");
  } else {
    for (int32_t k = nd - 1; k >= 0; --k) perm.push_back(k);
  }
  DG_CHECK(static_cast<int64_t>(perm.size()) == nd, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": perm has ", perm.size(), " entries for rank ", nd);
  const std::vector<int64_t> xs = ContiguousStrides(x.shape());
  std::vector<int64_t> strides(static_cast<size_t>(nd));
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  for (int32_t k = 0; k < nd; ++k) {
    const int64_t p = NormAxis(perm[k], nd);
    DG_CHECK(p >= 0 && p < nd && !seen[p], DG_INVALID_ARGUMENT, ctx.op_name(),
             ": perm is not a permutation of ", nd, " axes");
    seen[p] = true;
    DG_CHECK(y.dim(k) == x.dim(static_cast<int32_t>(p)), DG_INTERNAL,
             ctx.op_name(), ": output dim ", k, " is ", y.dim(k), ", expected ",
             x.dim(static_cast<int32_t>(p)));
    strides[k] = xs[p];
  }
  StridedToDense(dg::DTypeSize(x.dtype()), nd, y.raw()->shape, x.raw_data(),
                 strides.data(), y.raw_data());
}

DG_KERNEL_MASK("Transpose", "cpu", dg::kAny, 0, 0, TransposeKernel);

}  // namespace
}  // namespace cpu_eigen
