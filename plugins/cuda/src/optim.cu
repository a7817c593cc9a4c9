// Fused optimizer updates on cuda (SgdUpdate, AdamUpdate), one pass over
// the parameter, with the rules of cpu_eigen's optim.cc and the schemas in
// dragon_core/src/ops/optim.cc. lr and step are one-element device tensors
// read on the device (no host synchronisation); the scalar factors are
// computed in double and cast to the element type once, as on the CPU.
// Output 0 may be input 0's buffer (each element is read before written).
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

__device__ inline double ReadScalar(const void* p, DgDType t) {
  switch (t) {
    case DG_FLOAT32: return static_cast<double>(*static_cast<const float*>(p));
    case DG_FLOAT64: return *static_cast<const double*>(p);
    case DG_INT32: return static_cast<double>(*static_cast<const int32_t*>(p));
    case DG_INT64: return static_cast<double>(*static_cast<const int64_t*>(p));
    default: return NAN;
  }
}

struct Scalar {
  const void* p;
  DgDType dtype;
};

Scalar CheckScalar(const dg::KernelContext& ctx, int32_t i, const char* name) {
  const dg::TensorRef t = ctx.input(i);
  DG_CHECK(t.numel() == 1, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name,
           " must hold one value, got ", t.numel());
  const DgDType d = t.dtype();
  DG_CHECK(d == DG_FLOAT32 || d == DG_FLOAT64 || d == DG_INT32 || d == DG_INT64,
           DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name, " has dtype ", dg::DTypeName(d),
           ", expected float32, float64, int32 or int64");
  return Scalar{t.raw_data(), d};
}

int64_t CheckedCount(const dg::KernelContext& ctx, std::initializer_list<int32_t> inputs,
                     std::initializer_list<int32_t> outputs) {
  const int64_t n = ctx.input(0).numel();
  for (int32_t i : inputs)
    DG_CHECK(ctx.input(i).numel() == n, DG_INTERNAL, ctx.op_name(), ": input ", i, " has ",
             ctx.input(i).numel(), " elements, param has ", n);
  for (int32_t o : outputs)
    DG_CHECK(ctx.output(o).numel() == n, DG_INTERNAL, ctx.op_name(), ": output ", o, " has ",
             ctx.output(o).numel(), " elements, param has ", n);
  return n;
}

// Output `out` for a state the options leave unused: a copy of input `in`.
void PassThrough(const dg::KernelContext& ctx, int32_t in, int32_t out, cudaStream_t s) {
  const dg::TensorRef x = ctx.input(in), y = ctx.output(out);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": output ", out, " has ",
           y.numel(), " elements, input ", in, " has ", x.numel());
  const size_t bytes = static_cast<size_t>(x.numel()) * dg::DTypeSize(x.dtype());
  if (bytes == 0 || x.raw_data() == y.raw_data()) return;
  const cudaError_t e =
      cudaMemcpyAsync(y.raw_data(), x.raw_data(), bytes, cudaMemcpyDeviceToDevice, s);
  DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), ": copy failed: ", ErrorText(e));
}

// ------------------------------------------------------------ SGD

template <typename T>
struct SgdArgs {
  const T *p, *g, *buf;
  T *p_out, *buf_out;
  Scalar lr;
  T momentum, keep, weight_decay;
  bool nesterov, maximize;
};

template <typename T>
__global__ void SgdKernel(SgdArgs<T> a, int64_t n) {
  const T lr = static_cast<T>(ReadScalar(a.lr.p, a.lr.dtype));
  DGC_LOOP(i, n) {
    T d = a.maximize ? -a.g[i] : a.g[i];
    if (a.weight_decay != T(0)) d += a.weight_decay * a.p[i];
    if (a.buf) {
      const T b = a.momentum * a.buf[i] + a.keep * d;
      a.buf_out[i] = b;
      d = a.nesterov ? d + a.momentum * b : b;
    }
    a.p_out[i] = a.p[i] - lr * d;
  }
}

template <typename T>
void SgdUpdate(dg::KernelContext& ctx) {
  const bool use_momentum = ctx.f("momentum") != 0.0;
  const int64_t n = use_momentum ? CheckedCount(ctx, {1, 2}, {0, 1}) : CheckedCount(ctx, {1}, {0});
  cudaStream_t s = Prepare(ctx);
  if (!use_momentum) PassThrough(ctx, 2, 1, s);
  SgdArgs<T> a{};
  a.lr = CheckScalar(ctx, 3, "lr");
  a.momentum = static_cast<T>(ctx.f("momentum"));
  a.keep = static_cast<T>(1.0 - ctx.f("dampening"));
  a.weight_decay = static_cast<T>(ctx.f("weight_decay"));
  a.nesterov = ctx.b("nesterov");
  a.maximize = ctx.b("maximize");
  if (n == 0) return;
  a.p = static_cast<const T*>(ctx.input(0).raw_data());
  a.g = static_cast<const T*>(ctx.input(1).raw_data());
  a.buf = use_momentum ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
  a.p_out = static_cast<T*>(ctx.output(0).raw_data());
  a.buf_out = use_momentum ? static_cast<T*>(ctx.output(1).raw_data()) : nullptr;
  SgdKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("SgdUpdate", "cuda", 0, DG_KERNEL_INPLACE, SgdUpdate, float, double);

// ------------------------------------------------------------ Adam / AdamW

template <typename T>
struct AdamArgs {
  const T *p, *g, *m, *v, *vmax;
  T *p_out, *m_out, *v_out, *vmax_out;
  Scalar lr, step;
  double beta1, beta2, weight_decay, eps;
  bool decoupled, maximize;
};

template <typename T>
__global__ void AdamKernel(AdamArgs<T> a, int64_t n) {
  const double lr = ReadScalar(a.lr.p, a.lr.dtype);
  const double step = ReadScalar(a.step.p, a.step.dtype);
  const T step_size = static_cast<T>(lr / (1.0 - pow(a.beta1, step)));
  const T bc2_sqrt = static_cast<T>(sqrt(1.0 - pow(a.beta2, step)));
  const T eps = static_cast<T>(a.eps);
  const T b1 = static_cast<T>(a.beta1), omb1 = static_cast<T>(1 - a.beta1);
  const T b2 = static_cast<T>(a.beta2), omb2 = static_cast<T>(1 - a.beta2);
  const T l2 = a.decoupled ? T(0) : static_cast<T>(a.weight_decay);
  const T shrink = a.decoupled ? static_cast<T>(1.0 - lr * a.weight_decay) : T(1);
  DGC_LOOP(i, n) {
    T d = a.maximize ? -a.g[i] : a.g[i];
    if (l2 != T(0)) d += l2 * a.p[i];
    const T m = b1 * a.m[i] + omb1 * d;
    const T v = b2 * a.v[i] + omb2 * (d * d);
    a.m_out[i] = m;
    a.v_out[i] = v;
    T den;
    if (a.vmax) {
      const T vm = a.vmax[i] > v || a.vmax[i] != a.vmax[i] ? a.vmax[i] : v;
      a.vmax_out[i] = vm;
      den = sqrt(vm) / bc2_sqrt + eps;
    } else {
      den = sqrt(v) / bc2_sqrt + eps;
    }
    const T p = a.p[i];
    a.p_out[i] = (shrink != T(1) ? p * shrink : p) - step_size * (m / den);
  }
}

template <typename T>
void AdamUpdate(dg::KernelContext& ctx) {
  const bool amsgrad = ctx.b("amsgrad");
  const int64_t n = amsgrad ? CheckedCount(ctx, {1, 2, 3, 4}, {0, 1, 2, 3})
                            : CheckedCount(ctx, {1, 2, 3}, {0, 1, 2});
  cudaStream_t s = Prepare(ctx);
  if (!amsgrad) PassThrough(ctx, 4, 3, s);
  AdamArgs<T> a{};
  a.lr = CheckScalar(ctx, 5, "lr");
  // step >= 1 is checked by the CPU kernel on the host; here it is read on
  // the device, where a step < 1 gives the same formula's value.
  a.step = CheckScalar(ctx, 6, "step");
  a.beta1 = ctx.f("beta1");
  a.beta2 = ctx.f("beta2");
  a.weight_decay = ctx.f("weight_decay");
  a.eps = ctx.f("eps");
  a.decoupled = ctx.b("decoupled");
  a.maximize = ctx.b("maximize");
  if (n == 0) return;
  a.p = static_cast<const T*>(ctx.input(0).raw_data());
  a.g = static_cast<const T*>(ctx.input(1).raw_data());
  a.m = static_cast<const T*>(ctx.input(2).raw_data());
  a.v = static_cast<const T*>(ctx.input(3).raw_data());
  a.vmax = amsgrad ? static_cast<const T*>(ctx.input(4).raw_data()) : nullptr;
  a.p_out = static_cast<T*>(ctx.output(0).raw_data());
  a.m_out = static_cast<T*>(ctx.output(1).raw_data());
  a.v_out = static_cast<T*>(ctx.output(2).raw_data());
  a.vmax_out = amsgrad ? static_cast<T*>(ctx.output(3).raw_data()) : nullptr;
  AdamKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("AdamUpdate", "cuda", 0, DG_KERNEL_INPLACE, AdamUpdate, float, double);

// ------------------------------------------------------------ RMSprop

template <typename T>
struct RmspropArgs {
  const T *p, *g, *sq, *buf, *avg;
  T *p_out, *sq_out, *buf_out, *avg_out;
  Scalar lr;
  T alpha, one_minus_alpha, eps, weight_decay, momentum;
  bool maximize;
};

template <typename T>
__global__ void RmspropKernel(RmspropArgs<T> a, int64_t n) {
  const T lr = static_cast<T>(ReadScalar(a.lr.p, a.lr.dtype));
  DGC_LOOP(i, n) {
    T d = a.maximize ? -a.g[i] : a.g[i];
    if (a.weight_decay != T(0)) d += a.weight_decay * a.p[i];
    const T sq = a.alpha * a.sq[i] + a.one_minus_alpha * (d * d);
    a.sq_out[i] = sq;
    T den;
    if (a.avg) {
      const T av = a.alpha * a.avg[i] + a.one_minus_alpha * d;
      a.avg_out[i] = av;
      den = sqrt(sq - av * av) + a.eps;
    } else {
      den = sqrt(sq) + a.eps;
    }
    if (a.buf) {
      const T b = a.momentum * a.buf[i] + d / den;
      a.buf_out[i] = b;
      a.p_out[i] = a.p[i] - lr * b;
    } else {
      a.p_out[i] = a.p[i] - lr * (d / den);
    }
  }
}

template <typename T>
void RmspropUpdate(dg::KernelContext& ctx) {
  const bool use_momentum = ctx.f("momentum") != 0.0;
  const bool centered = ctx.b("centered");
  const int64_t n = CheckedCount(ctx, {1, 2}, {0, 1});
  cudaStream_t s = Prepare(ctx);
  if (use_momentum) {
    CheckedCount(ctx, {3}, {2});
  } else {
    PassThrough(ctx, 3, 2, s);
  }
  if (centered) {
    CheckedCount(ctx, {4}, {3});
  } else {
    PassThrough(ctx, 4, 3, s);
  }
  RmspropArgs<T> a{};
  a.lr = CheckScalar(ctx, 5, "lr");
  a.alpha = static_cast<T>(ctx.f("alpha"));
  a.one_minus_alpha = static_cast<T>(1.0 - ctx.f("alpha"));
  a.eps = static_cast<T>(ctx.f("eps"));
  a.weight_decay = static_cast<T>(ctx.f("weight_decay"));
  a.momentum = static_cast<T>(ctx.f("momentum"));
  a.maximize = ctx.b("maximize");
  if (n == 0) return;
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  auto out = [&](int i) { return static_cast<T*>(ctx.output(i).raw_data()); };
  a.p = in(0);
  a.g = in(1);
  a.sq = in(2);
  a.buf = use_momentum ? in(3) : nullptr;
  a.avg = centered ? in(4) : nullptr;
  a.p_out = out(0);
  a.sq_out = out(1);
  a.buf_out = use_momentum ? out(2) : nullptr;
  a.avg_out = centered ? out(3) : nullptr;
  RmspropKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("RmspropUpdate", "cuda", 0, DG_KERNEL_INPLACE, RmspropUpdate, float, double);

// ------------------------------------------------------------ Adagrad

template <typename T>
__global__ void AdagradKernel(const T* p, const T* g, const T* sum, T* p_out, T* sum_out,
                              int64_t n, Scalar lr_s, Scalar step_s, double lr_decay, T eps,
                              T weight_decay, bool maximize) {
  const double lr = ReadScalar(lr_s.p, lr_s.dtype), step = ReadScalar(step_s.p, step_s.dtype);
  const T clr = static_cast<T>(lr / (1.0 + (step - 1.0) * lr_decay));
  DGC_LOOP(i, n) {
    T d = maximize ? -g[i] : g[i];
    if (weight_decay != T(0)) d += weight_decay * p[i];
    const T s2 = sum[i] + d * d;
    sum_out[i] = s2;
    p_out[i] = p[i] - clr * (d / (sqrt(s2) + eps));
  }
}

template <typename T>
void AdagradUpdate(dg::KernelContext& ctx) {
  const int64_t n = CheckedCount(ctx, {1, 2}, {0, 1});
  const Scalar lr = CheckScalar(ctx, 3, "lr"), step = CheckScalar(ctx, 4, "step");
  if (n == 0) return;
  AdagradKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), static_cast<const T*>(ctx.input(1).raw_data()),
      static_cast<const T*>(ctx.input(2).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      static_cast<T*>(ctx.output(1).raw_data()), n, lr, step, ctx.f("lr_decay"),
      static_cast<T>(ctx.f("eps")), static_cast<T>(ctx.f("weight_decay")), ctx.b("maximize"));
  CheckLaunch(ctx);
}
DG_KERNEL_EX("AdagradUpdate", "cuda", 0, DG_KERNEL_INPLACE, AdagradUpdate, float, double);

}  // namespace
}  // namespace dragon_cuda
