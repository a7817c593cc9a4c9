// Data movement and conversion on cuda: Fill, Cast, Contiguous (any strides,
// the core's densify step), Reshape/Squeeze/Unsqueeze/Flatten (byte copies),
// BroadcastTo and Where. Also the index math every element-wise kernel uses.
#include <cstdint>
#include <cstring>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in_shape,
                                      const std::vector<int64_t>& in_strides,
                                      const std::vector<int64_t>& out_shape) {
  const size_t on = out_shape.size(), in = in_shape.size();
  DG_CHECK(in <= on, DG_INTERNAL, "input rank ", in, " exceeds output rank ", on);
  std::vector<int64_t> s(on, 0);
  for (size_t k = 0; k < in; ++k) {
    const size_t d = on - in + k;
    if (in_shape[k] == out_shape[d]) {
      s[d] = in_shape[k] == 1 ? 0 : in_strides[k];
    } else {
      DG_CHECK(in_shape[k] == 1, DG_INTERNAL, "shape ", dg::ShapeStr(in_shape),
               " does not broadcast to ", dg::ShapeStr(out_shape));
    }
  }
  return s;
}

Indexer MakeIndexer(const char* op, const std::vector<int64_t>& shape,
                    const std::vector<std::vector<int64_t>>& strides) {
  const size_t n = strides.size();
  // Drop size-1 axes, then merge neighbours contiguous for every operand.
  std::vector<int64_t> sh;
  std::vector<std::vector<int64_t>> st(n);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sh.empty()) {
      bool merge = true;
      for (size_t k = 0; k < n; ++k)
        merge = merge && st[k].back() == strides[k][d] * shape[d];
      if (merge) {
        sh.back() *= shape[d];
        for (size_t k = 0; k < n; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    sh.push_back(shape[d]);
    for (size_t k = 0; k < n; ++k) st[k].push_back(strides[k][d]);
  }
  DG_CHECK(sh.size() <= static_cast<size_t>(kMaxDims), DG_UNIMPLEMENTED, op,
           " on cuda: at most ", kMaxDims, " non-mergeable axes are supported, shape ",
           dg::ShapeStr(shape), " needs ", sh.size());
  Indexer ix;
  ix.ndim = static_cast<int32_t>(sh.size());
  for (size_t d = 0; d < sh.size(); ++d) {
    ix.shape[d] = sh[d];
    for (size_t k = 0; k < n; ++k) ix.strides[k][d] = st[k][d];
  }
  return ix;
}

bool IsDense(const Indexer& ix, int n) {
  if (ix.ndim == 0) return true;
  if (ix.ndim > 1) return false;
  for (int k = 0; k < n; ++k)
    if (ix.strides[k][0] != 1) return false;
  return true;
}

namespace {

// ------------------------------------------------------------ Fill

template <typename W>
__global__ void FillWords(W* y, int64_t n, W v) {
  DGC_LOOP(i, n) y[i] = v;
}

template <typename W>
void FillAs(dg::KernelContext& ctx, void* y, int64_t n, const char* value) {
  W v;
  std::memcpy(&v, value, sizeof(W));
  FillWords<W><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(static_cast<W*>(y), n, v);
  CheckLaunch(ctx);
}

// Every element = value converted to the output dtype (exact for
// int_value, whose range shape inference checked).
void FillKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  alignas(8) char value[8] = {};
  const bool exact = ctx.has("int_value");
  const int64_t iv = exact ? ctx.i("int_value") : 0;
  const double fv = exact ? 0.0 : ctx.f("value");
  Dispatch(y.dtype(), ctx.op_name(), [&](auto tag) {
    using T = decltype(tag);
    const T t = exact ? Convert<T>(iv) : Convert<T>(fv);
    std::memcpy(value, &t, sizeof(T));
  });
  switch (dg::DTypeSize(y.dtype())) {
    case 1: FillAs<uint8_t>(ctx, y.raw_data(), n, value); break;
    case 2: FillAs<uint16_t>(ctx, y.raw_data(), n, value); break;
    case 4: FillAs<uint32_t>(ctx, y.raw_data(), n, value); break;
    default: FillAs<uint64_t>(ctx, y.raw_data(), n, value); break;
  }
}
DG_KERNEL_MASK("Fill", "cuda", dg::kAll, 0, 0, FillKernel);

// ------------------------------------------------------------ Cast

template <typename In, typename Out>
struct ConvertOp {
  __device__ Out operator()(In x) const { return Convert<Out>(x); }
};

template <typename In>
void CastKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": input has ", x.numel(),
           " elements, output ", y.numel());
  Dispatch(y.dtype(), ctx.op_name(), [&](auto tag) {
    using Out = decltype(tag);
    LaunchUnary<In, Out>(ctx, ConvertOp<In, Out>{});
  });
}
DG_KERNEL_EX("Cast", "cuda", 0, DG_KERNEL_STRIDED_INPUTS, CastKernel, bool, uint8_t, int8_t,
             int16_t, int32_t, int64_t, half, bf16, float, double);

// ------------------------------------------------------------ copies

template <typename W>
struct IdentityOp {
  __device__ W operator()(W x) const { return x; }
};

// y = x (read through its strides, broadcast to y's shape), moved as
// words of the element size.
void StridedCopy(dg::KernelContext& ctx) {
  switch (dg::DTypeSize(ctx.input(0).dtype())) {
    case 1: LaunchUnary<uint8_t, uint8_t>(ctx, IdentityOp<uint8_t>{}); break;
    case 2: LaunchUnary<uint16_t, uint16_t>(ctx, IdentityOp<uint16_t>{}); break;
    case 4: LaunchUnary<uint32_t, uint32_t>(ctx, IdentityOp<uint32_t>{}); break;
    default: LaunchUnary<uint64_t, uint64_t>(ctx, IdentityOp<uint64_t>{}); break;
  }
}

void ContiguousKernel(dg::KernelContext& ctx) {
  DG_CHECK(ctx.input(0).shape() == ctx.output(0).shape(), DG_INTERNAL, ctx.op_name(),
           ": output shape differs from the input's");
  StridedCopy(ctx);
}
DG_KERNEL_MASK("Contiguous", "cuda", dg::kAll, 0, DG_KERNEL_STRIDED_INPUTS, ContiguousKernel);

// BroadcastTo: NumPy broadcast_to (right-aligned, size-1 axes repeat).
void BroadcastToKernel(dg::KernelContext& ctx) { StridedCopy(ctx); }
DG_KERNEL_MASK("BroadcastTo", "cuda", dg::kAll, 0, DG_KERNEL_STRIDED_INPUTS, BroadcastToKernel);

// Reshape, Squeeze, Unsqueeze, Flatten: the same bytes in the same order.
void CopyKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": input has ", x.numel(),
           " elements, output ", y.numel());
  const size_t bytes = static_cast<size_t>(x.numel()) * dg::DTypeSize(x.dtype());
  if (bytes == 0 || x.raw_data() == y.raw_data()) return;
  cudaStream_t s = Prepare(ctx);
  const cudaError_t e =
      cudaMemcpyAsync(y.raw_data(), x.raw_data(), bytes, cudaMemcpyDeviceToDevice, s);
  DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), " on cuda: copy failed: ",
           ErrorText(e));
}
DG_KERNEL_MASK("Reshape", "cuda", dg::kAll, 0, 0, CopyKernel);
DG_KERNEL_MASK("Squeeze", "cuda", dg::kAll, 0, 0, CopyKernel);
DG_KERNEL_MASK("Unsqueeze", "cuda", dg::kAll, 0, 0, CopyKernel);
DG_KERNEL_MASK("Flatten", "cuda", dg::kAll, 0, 0, CopyKernel);

// ------------------------------------------------------------ Where

template <typename W>
struct SelectOp {
  __device__ W operator()(bool c, W a, W b) const { return c ? a : b; }
};

template <typename W>
void LaunchWhere(dg::KernelContext& ctx) {
  const dg::TensorRef c = ctx.input(0), a = ctx.input(1), b = ctx.input(2), y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  const std::vector<int64_t> shape = y.shape();
  Indexer ix = MakeIndexer(ctx.op_name(), shape,
                           {BroadcastStrides(c.shape(), c.strides(), shape),
                            BroadcastStrides(a.shape(), a.strides(), shape),
                            BroadcastStrides(b.shape(), b.strides(), shape)});
  TernaryKernel<bool, W, SelectOp<W>><<<Blocks(n), kThreads, 0, s>>>(
      static_cast<const bool*>(c.raw_data()), static_cast<const W*>(a.raw_data()),
      static_cast<const W*>(b.raw_data()), static_cast<W*>(y.raw_data()), n, ix, IsDense(ix, 3),
      SelectOp<W>{});
  CheckLaunch(ctx);
}

// out = x where condition else y; the three broadcast together.
void WhereKernel(dg::KernelContext& ctx) {
  switch (dg::DTypeSize(ctx.input(1).dtype())) {
    case 1: LaunchWhere<uint8_t>(ctx); break;
    case 2: LaunchWhere<uint16_t>(ctx); break;
    case 4: LaunchWhere<uint32_t>(ctx); break;
    default: LaunchWhere<uint64_t>(ctx); break;
  }
}
DG_KERNEL_MASK("Where", "cuda", dg::kAll, 0, DG_KERNEL_STRIDED_INPUTS, WhereKernel);

}  // namespace
}  // namespace dragon_cuda
