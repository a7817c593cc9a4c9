// Classification losses on cuda with cpu_eigen's semantics (loss.cc):
// SoftmaxCrossEntropy (label smoothing, ignore_index) and NllLoss. The
// input is (outer, C, inner): [N, C, d...] or [C]. Each position's loss is
// computed in double; "mean" divides by the number of targets that are not
// ignore_index (0/0 = NaN when all are ignored). Targets live on the
// device: one outside [0, C) that is not ignore_index counts 0 and records
// a device-side check, reported as OutOfRangeError at the next host wait.
// float16/bfloat16 logits are widened to double the same way; the loss is
// rounded to the dtype once.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

__device__ void ReportTarget(DeviceCheck* c, int32_t op, int64_t v, int64_t bound, int64_t pos) {
  if (atomicCAS(&c->failed, 0, 1) == 0) {
    c->op = op;
    c->value = v;
    c->bound = bound;
    c->position = pos;
    __threadfence_system();
  }
}

struct Layout {
  int64_t outer = 1, classes = 1, inner = 1;
};

Layout GetLayout(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  DG_CHECK(x.ndim() >= 1, DG_INTERNAL, ctx.op_name(), ": input needs a class axis");
  Layout l;
  if (x.ndim() == 1) {
    l.classes = x.dim(0);
  } else {
    l.outer = x.dim(0);
    l.classes = x.dim(1);
    for (int32_t k = 2; k < x.ndim(); ++k) l.inner *= x.dim(k);
  }
  DG_CHECK(ctx.input(1).numel() == l.outer * l.inner, DG_INTERNAL, ctx.op_name(),
           ": target has ", ctx.input(1).numel(), " elements, expected ", l.outer * l.inner);
  return l;
}

// terms[i] = loss of position i (0 if ignored), terms[m + i] = 1 if counted.
template <bool kCrossEntropy, typename T, typename I>
__global__ void Terms(const T* x, const I* target, double* terms, Layout l, int64_t ignore,
                      double smoothing, int32_t op, DeviceCheck* check) {
  const int64_t m = l.outer * l.inner;
  DGC_LOOP(i, m) {
    const int64_t t = static_cast<int64_t>(target[i]);
    double loss = 0.0, counted = 0.0;
    if (t != ignore) {
      if (t < 0 || t >= l.classes) {
        ReportTarget(check, op, t, l.classes, i);
      } else {
        counted = 1.0;
        const int64_t o = i / l.inner, s = i % l.inner;
        const T* base = x + o * l.classes * l.inner + s;
        if constexpr (kCrossEntropy) {
          double mx = ToDouble(base[0]);
          for (int64_t c = 1; c < l.classes; ++c) {
            const double v = ToDouble(base[c * l.inner]);
            if (v > mx || v != v) mx = v;
          }
          double sum_exp = 0.0, sum_x = 0.0;
          for (int64_t c = 0; c < l.classes; ++c) {
            const double v = ToDouble(base[c * l.inner]);
            sum_exp += exp(v - mx);
            sum_x += v;
          }
          loss = mx + log(sum_exp) - (1.0 - smoothing) * ToDouble(base[t * l.inner]);
          if (smoothing != 0.0) loss -= smoothing / static_cast<double>(l.classes) * sum_x;
        } else {
          loss = -ToDouble(base[t * l.inner]);
        }
      }
    }
    terms[i] = loss;
    terms[m + i] = counted;
  }
}

// The same terms for [N, C] logits with many classes (inner == 1): one warp
// per position, lanes reading the row's classes coalesced, the row's
// maximum (NaN wins, as the sequential scan), sum of exp and sum of values
// combined by a fixed shuffle tree (the same bits every run). A position is
// warp-uniform, so the whole warp takes the same branches.
__device__ inline double NanMax(double a, double b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}

template <typename T, typename I>
__global__ void CrossEntropyRows(const T* x, const I* target, double* terms, Layout l,
                                 int64_t ignore, double smoothing, int32_t op,
                                 DeviceCheck* check) {
  const int64_t m = l.outer;
  const int lane = threadIdx.x & 31;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int64_t step = (static_cast<int64_t>(blockDim.x) * gridDim.x) >> 5;
  for (int64_t i = first; i < m; i += step) {
    const int64_t t = static_cast<int64_t>(target[i]);
    double loss = 0.0, counted = 0.0;
    if (t != ignore) {
      if (t < 0 || t >= l.classes) {
        if (lane == 0) ReportTarget(check, op, t, l.classes, i);
      } else {
        counted = 1.0;
        const T* row = x + i * l.classes;
        double mx = -INFINITY;
        for (int64_t c = lane; c < l.classes; c += 32) mx = NanMax(mx, ToDouble(row[c]));
        for (int off = 16; off > 0; off >>= 1)
          mx = NanMax(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        double sum_exp = 0.0, sum_x = 0.0;
        for (int64_t c = lane; c < l.classes; c += 32) {
          const double v = ToDouble(row[c]);
          sum_exp += exp(v - mx);
          sum_x += v;
        }
        for (int off = 16; off > 0; off >>= 1) {
          sum_exp += __shfl_xor_sync(0xffffffffu, sum_exp, off);
          sum_x += __shfl_xor_sync(0xffffffffu, sum_x, off);
        }
        loss = mx + log(sum_exp) - (1.0 - smoothing) * ToDouble(row[t]);
        if (smoothing != 0.0) loss -= smoothing / static_cast<double>(l.classes) * sum_x;
      }
    }
    if (lane == 0) {
      terms[i] = loss;
      terms[m + i] = counted;
    }
  }
}

template <typename T>
__global__ void WriteTerms(const double* terms, T* y, int64_t m) {
  DGC_LOOP(i, m) y[i] = FromDouble<T>(terms[i]);
}

// One block: y[0] = sum (or sum / counted) of the terms, in double.
template <typename T>
__global__ void ReduceTerms(const double* terms, T* y, int64_t m, bool mean) {
  __shared__ double a[kThreads], b[kThreads];
  double s = 0, c = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    s += terms[i];
    c += terms[m + i];
  }
  a[threadIdx.x] = s;
  b[threadIdx.x] = c;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) {
      a[threadIdx.x] += a[threadIdx.x + k];
      b[threadIdx.x] += b[threadIdx.x + k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = FromDouble<T>(mean ? a[0] / b[0] : a[0]);
}

template <bool kCrossEntropy, typename T>
void ClassLoss(dg::KernelContext& ctx, int32_t op) {
  const std::string r = ctx.s("reduction");
  DG_CHECK(r == "none" || r == "sum" || r == "mean", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": reduction must be \"mean\", \"sum\" or \"none\", got \"", r, "\"");
  const Layout l = GetLayout(ctx);
  double smoothing = 0.0;
  if constexpr (kCrossEntropy) {
    smoothing = ctx.f("label_smoothing");
    DG_CHECK(smoothing >= 0.0 && smoothing <= 1.0, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": label_smoothing must be in [0, 1], got ", smoothing);
  }
  const int64_t ignore = ctx.i("ignore_index");
  const int64_t m = l.outer * l.inner;
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  cudaStream_t s = Prepare(ctx);
  if (m == 0) {
    if (r == "none") return;
    ReduceTerms<T><<<1, kThreads, 0, s>>>(nullptr, y, 0, r == "mean");  // 0, or 0/0
    CheckLaunch(ctx);
    return;
  }
  std::string error;
  DeviceCheck* check = DeviceCheckRecord(&error);
  DG_CHECK(check != nullptr, DG_INTERNAL, ctx.op_name(), " on cuda: ", error);
  double* terms = ctx.workspace<double>(static_cast<size_t>(2 * m));
  const dg::TensorRef t = ctx.input(1);
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  DG_CHECK(t.dtype() == DG_INT32 || t.dtype() == DG_INT64, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": target must be int32 or int64, got ", dg::DTypeName(t.dtype()));
  auto launch = [&](auto* target) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(target)>>;
    if (kCrossEntropy && l.inner == 1 && l.classes >= 32 && m <= (int64_t{1} << 40)) {
      CrossEntropyRows<T, I><<<Blocks(m * 32), kThreads, 0, s>>>(x, target, terms, l, ignore,
                                                                  smoothing, op, check);
    } else {
      Terms<kCrossEntropy, T, I><<<Blocks(m), kThreads, 0, s>>>(x, target, terms, l, ignore,
                                                               smoothing, op, check);
    }
  };
  if (t.dtype() == DG_INT32) {
    launch(static_cast<const int32_t*>(t.raw_data()));
  } else {
    launch(static_cast<const int64_t*>(t.raw_data()));
  }
  CheckLaunch(ctx);
  if (r == "none") {
    WriteTerms<T><<<Blocks(m), kThreads, 0, s>>>(terms, y, m);
  } else {
    ReduceTerms<T><<<1, kThreads, 0, s>>>(terms, y, m, r == "mean");
  }
  CheckLaunch(ctx);
}

template <typename T>
void SoftmaxCrossEntropy(dg::KernelContext& ctx) {
  ClassLoss<true, T>(ctx, kCheckSoftmaxCrossEntropy);
}
template <typename T>
void NllLoss(dg::KernelContext& ctx) { ClassLoss<false, T>(ctx, kCheckNllLoss); }
DG_KERNEL("SoftmaxCrossEntropy", "cuda", SoftmaxCrossEntropy, float, double, half, bf16);
DG_KERNEL("NllLoss", "cuda", NllLoss, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
