// Shape and join ops on cuda, as cpu_eigen's (transpose.cc, slice.cc,
// concat.cc, creation.cc): Transpose, Slice (Python/NumPy slice rules),
// Concat, Stack, Split and Arange. Each copy is one strided kernel over
// the copied block: source and destination offsets come from their own
// strides, element words moved by size (every dtype).
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

template <typename W>
__global__ void CopyBlock(const W* src, W* dst, int64_t n, Indexer ix) {
  DGC_LOOP(i, n) {
    int64_t off[2];
    ix.Offsets(i, off, 2);
    dst[off[1]] = src[off[0]];
  }
}

// Copies the block of `shape` from src (element strides ss) to dst (ds),
// both pointers at the block's first element.
void Copy(dg::KernelContext& ctx, size_t esize, const void* src, const std::vector<int64_t>& ss,
          void* dst, const std::vector<int64_t>& ds, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  const Indexer ix = MakeIndexer(ctx.op_name(), shape, {ss, ds});
  cudaStream_t s = Prepare(ctx);
  switch (esize) {
    case 1:
      CopyBlock<uint8_t><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, ix);
      break;
    case 2:
      CopyBlock<uint16_t><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), n, ix);
      break;
    case 4:
      CopyBlock<uint32_t><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, ix);
      break;
    default:
      CopyBlock<uint64_t><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), n, ix);
      break;
  }
  CheckLaunch(ctx);
}

int64_t NormAxis(const dg::KernelContext& ctx, int64_t axis, int32_t nd) {
  const int64_t a = axis < 0 ? axis + nd : axis;
  DG_CHECK(a >= 0 && a < nd, DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", axis,
           " out of range for rank ", nd);
  return a;
}

char* At(void* p, int64_t elems, size_t esize) {
  return static_cast<char*>(p) + elems * static_cast<int64_t>(esize);
}

// y = x with axes permuted by perm (unset: reversed).
void Transpose(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  std::vector<int64_t> perm;
  if (ctx.has("perm")) {
    perm = ctx.ints("perm");
  } else {
    for (int32_t k = nd - 1; k >= 0; --k) perm.push_back(k);
  }
  DG_CHECK(static_cast<int64_t>(perm.size()) == nd, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": perm has ", perm.size(), " entries for rank ", nd);
  const std::vector<int64_t> xs = DenseStrides(x.shape());
  std::vector<int64_t> ss(nd);
  std::vector<bool> seen(nd, false);
  for (int32_t k = 0; k < nd; ++k) {
    const int64_t p = NormAxis(ctx, perm[k], nd);
    DG_CHECK(!seen[p], DG_INVALID_ARGUMENT, ctx.op_name(), ": perm repeats axis ", perm[k]);
    seen[p] = true;
    ss[k] = xs[p];
  }
  Copy(ctx, dg::DTypeSize(x.dtype()), x.raw_data(), ss, y.raw_data(), DenseStrides(y.shape()),
       y.shape());
}
DG_KERNEL_MASK("Transpose", "cuda", dg::kAll, 0, 0, Transpose);

// Python's slice(start, stop, step).indices(len): the first index and the
// number of selected elements.
void SliceIndices(int64_t start, int64_t stop, int64_t step, int64_t len, int64_t* first,
                  int64_t* count) {
  if (step < -std::numeric_limits<int64_t>::max()) step = -std::numeric_limits<int64_t>::max();
  auto clamp = [&](int64_t v) {
    if (v < 0) {
      v += len;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= len) {
      v = step < 0 ? len - 1 : len;
    }
    return v;
  };
  start = clamp(start);
  stop = clamp(stop);
  *first = start;
  *count = 0;
  if (step < 0) {
    if (stop < start) *count = (start - stop - 1) / (-step) + 1;
  } else if (start < stop) {
    *count = (stop - start - 1) / step + 1;
  }
}

void Slice(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  const std::vector<int64_t> starts = ctx.ints("starts"), ends = ctx.ints("ends"),
                             steps = ctx.ints("steps");
  const size_t k = starts.size();
  DG_CHECK(ends.size() == k && steps.size() == k, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": starts, ends and steps differ in length (", k, ", ", ends.size(), ", ",
           steps.size(), ")");
  std::vector<int64_t> axes;
  if (ctx.has("axes")) {
    axes = ctx.ints("axes");
    DG_CHECK(axes.size() == k, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", axes.size(),
             " axes for ", k, " starts");
  } else {
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  const std::vector<int64_t> xs = DenseStrides(x.shape());
  std::vector<int64_t> ss = xs;
  std::vector<bool> seen(nd, false);
  int64_t offset = 0;
  for (size_t i = 0; i < k; ++i) {
    const int64_t a = NormAxis(ctx, axes[i], nd);
    DG_CHECK(!seen[a], DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", axes[i], " given twice");
    seen[a] = true;
    DG_CHECK(steps[i] != 0, DG_INVALID_ARGUMENT, ctx.op_name(), ": step is 0 on axis ", axes[i]);
    int64_t first, count;
    SliceIndices(starts[i], ends[i], steps[i], x.dim(static_cast<int32_t>(a)), &first, &count);
    DG_CHECK(count == y.dim(static_cast<int32_t>(a)), DG_INTERNAL, ctx.op_name(), ": axis ", a,
             " selects ", count, " elements, output has ", y.dim(static_cast<int32_t>(a)));
    if (count == 0) return;
    offset += first * xs[a];
    ss[a] = count == 1 ? xs[a] : xs[a] * steps[i];
  }
  const size_t es = dg::DTypeSize(x.dtype());
  Copy(ctx, es, At(x.raw_data(), offset, es), ss, y.raw_data(), DenseStrides(y.shape()),
       y.shape());
}
DG_KERNEL_MASK("Slice", "cuda", dg::kAll, 0, 0, Slice);

// Concat (stack = false) or Stack (a new axis): each input is one block of
// y along the axis.
void Join(dg::KernelContext& ctx, bool stack) {
  const dg::TensorRef y = ctx.output(0);
  const int32_t nd = y.ndim();
  const int32_t a = static_cast<int32_t>(NormAxis(ctx, ctx.i("axis"), nd));
  const std::vector<int64_t> ys = DenseStrides(y.shape());
  const size_t es = dg::DTypeSize(y.dtype());
  int64_t at = 0;
  for (int32_t i = 0; i < ctx.num_inputs(); ++i) {
    const dg::TensorRef x = ctx.input(i);
    std::vector<int64_t> shape = x.shape();
    if (stack) shape.insert(shape.begin() + a, 1);
    DG_CHECK(static_cast<int32_t>(shape.size()) == nd, DG_INTERNAL, ctx.op_name(), ": input ", i,
             " has rank ", x.ndim());
    Copy(ctx, es, x.raw_data(), DenseStrides(shape), At(y.raw_data(), at * ys[a], es), ys, shape);
    at += shape[a];
  }
  DG_CHECK(at == y.dim(a), DG_INTERNAL, ctx.op_name(), ": inputs fill ", at, " of ", y.dim(a),
           " entries along axis ", a);
}
void Concat(dg::KernelContext& ctx) { Join(ctx, false); }
void Stack(dg::KernelContext& ctx) { Join(ctx, true); }
DG_KERNEL_MASK("Concat", "cuda", dg::kAll, 0, 0, Concat);
DG_KERNEL_MASK("Stack", "cuda", dg::kAll, 0, 0, Stack);

// outputs[k] = x[..., sizes[0] + ... + sizes[k-1] : + sizes[k], ...].
void Split(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const int32_t a = static_cast<int32_t>(NormAxis(ctx, ctx.i("axis"), x.ndim()));
  const std::vector<int64_t> xs = DenseStrides(x.shape());
  const size_t es = dg::DTypeSize(x.dtype());
  int64_t at = 0;
  for (int32_t k = 0; k < ctx.num_outputs(); ++k) {
    const dg::TensorRef y = ctx.output(k);
    Copy(ctx, es, At(x.raw_data(), at * xs[a], es), xs, y.raw_data(), DenseStrides(y.shape()),
         y.shape());
    at += y.dim(a);
  }
  DG_CHECK(at == x.dim(a), DG_INTERNAL, ctx.op_name(), ": outputs take ", at, " of ", x.dim(a),
           " entries along axis ", a);
}
DG_KERNEL_MASK("Split", "cuda", dg::kAll, 0, 0, Split);

// y[i] = start + i * step in double, converted by Cast's rules.
template <typename T>
__global__ void ArangeKernel(T* y, int64_t n, double start, double step) {
  DGC_LOOP(i, n) y[i] = Convert<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}
template <typename T>
void Arange(dg::KernelContext& ctx) {
  const double step = ctx.f("step");
  DG_CHECK(step != 0.0, DG_INVALID_ARGUMENT, ctx.op_name(), ": step is 0");
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  ArangeKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(static_cast<T*>(ctx.output(0).raw_data()),
                                                            n, ctx.f("start"), step);
  CheckLaunch(ctx);
}
DG_KERNEL("Arange", "cuda", Arange, uint8_t, int8_t, int16_t, int32_t, int64_t, half, bf16,
          float, double);

// ------------------------------------------------------------ Pad
// NumPy pad: "constant" (value cast to x's dtype), "reflect" (edge not
// repeated, period 2(n-1)) or "edge"; one thread per output element.

enum PadMode : int32_t { kConstant, kReflect, kEdge };

struct PadGeom {
  int32_t ndim = 0, mode = kConstant;
  int64_t in[kMaxDims] = {}, out[kMaxDims] = {}, before[kMaxDims] = {};
};

__device__ int64_t SourceIndex(int64_t c, int64_t n, int32_t mode) {
  if (c >= 0 && c < n) return c;
  if (mode == kConstant) return -1;
  if (mode == kEdge) return c < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  c %= period;
  if (c < 0) c += period;
  return c < n ? c : period - c;
}

template <typename W>
__global__ void PadKernel(const W* x, W* y, int64_t total, PadGeom g, W value) {
  DGC_LOOP(t, total) {
    int64_t rest = t, src = 0, scale = 1;
    bool constant = false;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t c = rest % g.out[d];
      rest /= g.out[d];
      const int64_t si = SourceIndex(c - g.before[d], g.in[d], g.mode);
      if (si < 0) constant = true;
      src += si * scale;
      scale *= g.in[d];
    }
    y[t] = constant ? value : x[src];
  }
}

template <typename W>
void PadAs(dg::KernelContext& ctx, const PadGeom& g, const char* value) {
  W v;
  std::memcpy(&v, value, sizeof(W));
  const int64_t n = ctx.output(0).numel();
  PadKernel<W><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const W*>(ctx.input(0).raw_data()), static_cast<W*>(ctx.output(0).raw_data()), n,
      g, v);
  CheckLaunch(ctx);
}

void Pad(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  const std::vector<int64_t> pads = ctx.ints("pads");
  DG_CHECK(static_cast<int64_t>(pads.size()) == 2 * nd, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": pads has ", pads.size(), " entries, expected ", 2 * nd, " for rank ", nd);
  DG_CHECK(nd <= kMaxDims, DG_UNIMPLEMENTED, ctx.op_name(), " on cuda: rank ", nd, " exceeds ",
           kMaxDims);
  const std::string mode = ctx.s("mode");
  PadGeom g;
  if (mode == "constant") {
    g.mode = kConstant;
  } else if (mode == "reflect") {
    g.mode = kReflect;
  } else {
    DG_CHECK(mode == "edge", DG_INVALID_ARGUMENT, ctx.op_name(),
             ": mode must be \"constant\", \"reflect\" or \"edge\", got \"", mode, "\"");
    g.mode = kEdge;
  }
  g.ndim = nd;
  for (int32_t k = 0; k < nd; ++k) {
    DG_CHECK(pads[2 * k] >= 0 && pads[2 * k + 1] >= 0, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": negative pad on axis ", k);
    DG_CHECK(y.dim(k) == x.dim(k) + pads[2 * k] + pads[2 * k + 1], DG_INTERNAL, ctx.op_name(),
             ": output dim ", k, " is ", y.dim(k), ", expected ",
             x.dim(k) + pads[2 * k] + pads[2 * k + 1]);
    g.in[k] = x.dim(k);
    g.out[k] = y.dim(k);
    g.before[k] = pads[2 * k];
  }
  if (y.numel() == 0) return;
  DG_CHECK(x.numel() > 0 || g.mode == kConstant, DG_INVALID_ARGUMENT, ctx.op_name(), ": mode '",
           mode, "' cannot pad an empty input");
  alignas(8) char value[8] = {};
  const double fv = ctx.f("value");
  Dispatch(y.dtype(), ctx.op_name(), [&](auto tag) {
    using T = decltype(tag);
    const T t = Convert<T>(fv);
    std::memcpy(value, &t, sizeof(T));
  });
  switch (dg::DTypeSize(x.dtype())) {
    case 1: PadAs<uint8_t>(ctx, g, value); break;
    case 2: PadAs<uint16_t>(ctx, g, value); break;
    case 4: PadAs<uint32_t>(ctx, g, value); break;
    default: PadAs<uint64_t>(ctx, g, value); break;
  }
}
DG_KERNEL_MASK("Pad", "cuda", dg::kNumeric, 0, 0, Pad);

}  // namespace
}  // namespace dragon_cuda
