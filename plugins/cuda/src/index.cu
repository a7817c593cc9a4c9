// Index ops on cuda, with cpu_eigen's conventions (gather.cc, nn_misc.cc,
// one_hot.cc, scatter.cc): Gather (a negative index wraps once), Embedding,
// OneHot and ScatterAdd. Indices live on the device, so they are checked
// there: an index out of range writes zeros (never reads or writes out of
// bounds) and records a device-side check that the next host wait reports
// as DG_OUT_OF_RANGE naming the op, the index and its position (runtime.h).
// ScatterAdd is deterministic: one thread per (outer, inner) column applies
// the updates in index order, as the CPU does; no atomics.
#include <cstdint>
#include <cstring>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

__device__ void Report(DeviceCheck* c, int32_t op, int64_t v, int64_t bound, int64_t pos) {
  if (atomicCAS(&c->failed, 0, 1) == 0) {
    c->op = op;
    c->value = v;
    c->bound = bound;
    c->position = pos;
    __threadfence_system();
  }
}

DeviceCheck* Record(const dg::KernelContext& ctx) {
  std::string error;
  DeviceCheck* c = DeviceCheckRecord(&error);
  DG_CHECK(c != nullptr, DG_INTERNAL, ctx.op_name(), " on cuda: ", error);
  return c;
}

int64_t NormAxis(const dg::KernelContext& ctx, int64_t axis, int32_t nd) {
  const int64_t a = axis < 0 ? axis + nd : axis;
  DG_CHECK(a >= 0 && a < nd, DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", axis,
           " out of range for rank ", nd);
  return a;
}

template <typename F>
void DispatchIndex(const dg::KernelContext& ctx, const dg::TensorRef& t, F&& f) {
  if (t.dtype() == DG_INT32) {
    f(static_cast<const int32_t*>(t.raw_data()));
  } else if (t.dtype() == DG_INT64) {
    f(static_cast<const int64_t*>(t.raw_data()));
  } else {
    DG_CHECK(false, DG_INVALID_ARGUMENT, ctx.op_name(), ": indices must be int32 or int64, got ",
             dg::DTypeName(t.dtype()));
  }
}

// y[o, i, k] = x[o, idx[i], k] (rows of `inner` words W).
template <typename W, typename I>
__global__ void GatherKernel(const W* x, const I* idx, W* y, int64_t outer, int64_t n, int64_t m,
                             int64_t inner, bool wrap, int32_t op, DeviceCheck* check) {
  DGC_LOOP(t, outer * m * inner) {
    const int64_t k = t % inner, r = t / inner, i = r % m, o = r / m;
    int64_t v = static_cast<int64_t>(idx[i]);
    if (wrap && v < 0) v += n;
    if (v < 0 || v >= n) {
      if (k == 0) Report(check, op, static_cast<int64_t>(idx[i]), n, i);
      y[t] = W(0);
    } else {
      y[t] = x[(o * n + v) * inner + k];
    }
  }
}

template <typename W>
void GatherAs(dg::KernelContext& ctx, const dg::TensorRef& x, const dg::TensorRef& indices,
              int64_t outer, int64_t n, int64_t inner, bool wrap, int32_t op) {
  const dg::TensorRef y = ctx.output(0);
  const int64_t m = indices.numel();
  DG_CHECK(y.numel() == outer * m * inner, DG_INTERNAL, ctx.op_name(), ": output has ",
           y.numel(), " elements, expected ", outer * m * inner);
  if (y.numel() == 0) return;
  cudaStream_t s = Prepare(ctx);
  DeviceCheck* check = Record(ctx);
  DispatchIndex(ctx, indices, [&](auto* idx) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    GatherKernel<W, I><<<Blocks(y.numel()), kThreads, 0, s>>>(
        static_cast<const W*>(x.raw_data()), idx, static_cast<W*>(y.raw_data()), outer, n, m,
        inner, wrap, op, check);
  });
  CheckLaunch(ctx);
}

void GatherBytes(dg::KernelContext& ctx, const dg::TensorRef& x, const dg::TensorRef& indices,
                 int64_t outer, int64_t n, int64_t inner, bool wrap, int32_t op) {
  switch (dg::DTypeSize(x.dtype())) {
    case 1: GatherAs<uint8_t>(ctx, x, indices, outer, n, inner, wrap, op); break;
    case 2: GatherAs<uint16_t>(ctx, x, indices, outer, n, inner, wrap, op); break;
    case 4: GatherAs<uint32_t>(ctx, x, indices, outer, n, inner, wrap, op); break;
    default: GatherAs<uint64_t>(ctx, x, indices, outer, n, inner, wrap, op); break;
  }
}

// y = x.take(indices, axis).
void Gather(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const int32_t a = static_cast<int32_t>(NormAxis(ctx, ctx.i("axis"), x.ndim()));
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < a; ++k) outer *= x.dim(k);
  for (int32_t k = a + 1; k < x.ndim(); ++k) inner *= x.dim(k);
  GatherBytes(ctx, x, ctx.input(1), outer, x.dim(a), inner, true, kCheckGather);
}
DG_KERNEL_MASK("Gather", "cuda", dg::kAll, 0, 0, Gather);

// y[..., :] = weight[indices[...], :]; an index outside [0, rows) fails.
void Embedding(dg::KernelContext& ctx) {
  const dg::TensorRef w = ctx.input(0);
  DG_CHECK(w.ndim() == 2, DG_INTERNAL, ctx.op_name(), ": weight must be 2-D, got ",
           dg::ShapeStr(w.shape()));
  GatherBytes(ctx, w, ctx.input(1), 1, w.dim(0), w.dim(1), false, kCheckEmbedding);
}
DG_KERNEL_MASK("Embedding", "cuda", dg::kAll, 0, 0, Embedding);

// ------------------------------------------------------------ OneHot

template <typename W, typename I>
__global__ void OneHotKernel(const I* idx, W* y, int64_t m, int64_t depth, int64_t inner, W on,
                             W off, DeviceCheck* check) {
  DGC_LOOP(t, m * depth) {
    // t enumerates the output: (o, d, r) with m = outer * inner.
    const int64_t r = t % inner, d = (t / inner) % depth, o = t / (inner * depth);
    const int64_t pos = o * inner + r;
    const int64_t v = static_cast<int64_t>(idx[pos]);
    if (d == 0 && (v < 0 || v >= depth)) Report(check, kCheckOneHot, v, depth, pos);
    y[t] = v == d ? on : off;
  }
}

template <typename I>
void OneHot(dg::KernelContext& ctx) {
  const dg::TensorRef indices = ctx.input(0), y = ctx.output(0);
  const int64_t depth = ctx.i("depth");
  const int32_t nd = y.ndim();
  DG_CHECK(nd == indices.ndim() + 1, DG_INTERNAL, ctx.op_name(), ": output rank ", nd,
           " for indices of rank ", indices.ndim());
  const int64_t axis = NormAxis(ctx, ctx.i("axis"), nd);
  DG_CHECK(y.dim(static_cast<int32_t>(axis)) == depth, DG_INTERNAL, ctx.op_name(),
           ": output has ", y.dim(static_cast<int32_t>(axis)), " entries along axis ", axis,
           ", depth is ", depth);
  if (y.numel() == 0) return;
  int64_t inner = 1;
  for (int32_t k = static_cast<int32_t>(axis); k < indices.ndim(); ++k) inner *= indices.dim(k);
  const int64_t m = indices.numel();
  cudaStream_t s = Prepare(ctx);
  DeviceCheck* check = Record(ctx);
  const double on = ctx.f("on_value"), off = ctx.f("off_value");
  Dispatch(y.dtype(), ctx.op_name(), [&](auto tag) {
    using T = decltype(tag);
    OneHotKernel<T, I><<<Blocks(m * depth), kThreads, 0, s>>>(
        static_cast<const I*>(indices.raw_data()), static_cast<T*>(y.raw_data()), m, depth,
        inner, Convert<T>(on), Convert<T>(off), check);
  });
  CheckLaunch(ctx);
}
DG_KERNEL("OneHot", "cuda", OneHot, int32_t, int64_t);

// ------------------------------------------------------------ ScatterAdd

template <typename T, typename I>
__global__ void ScatterAddKernel(T* y, const I* idx, const T* upd, int64_t outer, int64_t n,
                                 int64_t m, int64_t inner, DeviceCheck* check) {
  DGC_LOOP(t, outer * inner) {
    const int64_t o = t / inner, k = t % inner;
    for (int64_t i = 0; i < m; ++i) {
      int64_t v = static_cast<int64_t>(idx[i]);
      if (v < 0) v += n;
      if (v < 0 || v >= n) {
        if (t == 0) Report(check, kCheckScatterAdd, static_cast<int64_t>(idx[i]), n, i);
        continue;
      }
      T& dst = y[(o * n + v) * inner + k];
      const T u = upd[(o * m + i) * inner + k];
      if constexpr (std::is_integral<T>::value) {
        using U = std::make_unsigned_t<T>;
        dst = static_cast<T>(static_cast<U>(static_cast<U>(dst) + static_cast<U>(u)));
      } else {
        dst = static_cast<T>(static_cast<Acc<T>>(dst) + static_cast<Acc<T>>(u));
      }
    }
  }
}

template <typename T>
void ScatterAdd(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), indices = ctx.input(1), updates = ctx.input(2),
                      y = ctx.output(0);
  const int32_t a = static_cast<int32_t>(NormAxis(ctx, ctx.i("axis"), x.ndim()));
  const int64_t n = x.dim(a), m = indices.numel();
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < a; ++k) outer *= x.dim(k);
  for (int32_t k = a + 1; k < x.ndim(); ++k) inner *= x.dim(k);
  DG_CHECK(y.numel() == x.numel() && updates.numel() == outer * m * inner, DG_INTERNAL,
           ctx.op_name(), ": y has ", y.numel(), " elements and updates ", updates.numel(),
           ", expected ", x.numel(), " and ", outer * m * inner);
  if (y.numel() == 0) return;
  cudaStream_t s = Prepare(ctx);
  if (y.raw_data() != x.raw_data()) {
    const cudaError_t e = cudaMemcpyAsync(y.raw_data(), x.raw_data(), x.numel() * sizeof(T),
                                          cudaMemcpyDeviceToDevice, s);
    DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), ": copy failed: ", ErrorText(e));
  }
  if (m == 0 || inner == 0 || outer == 0) return;
  DeviceCheck* check = Record(ctx);
  DispatchIndex(ctx, indices, [&](auto* idx) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    ScatterAddKernel<T, I><<<Blocks(outer * inner), kThreads, 0, s>>>(
        static_cast<T*>(y.raw_data()), idx, static_cast<const T*>(updates.raw_data()), outer, n,
        m, inner, check);
  });
  CheckLaunch(ctx);
}
DG_KERNEL("ScatterAdd", "cuda", ScatterAdd, float, double, half, bf16, int8_t, int16_t, int32_t,
          int64_t, uint8_t);

}  // namespace
}  // namespace dragon_cuda
