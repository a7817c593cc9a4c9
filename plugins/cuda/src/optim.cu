// Fused optimizer updates on cuda (SgdUpdate, AdamUpdate and their
// multi-tensor forms, RmspropUpdate, AdagradUpdate), one pass over the
// parameter, with the rules of cpu_eigen's optim.cc and the schemas in
// dragon_core/src/ops/optim.cc. lr and step are one-element device tensors
// read on the device (no host synchronisation); the scalar factors are
// computed in double and cast to the element type once, as on the CPU.
// Output 0 may be input 0's buffer (each element is read before written).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "elementwise.cuh"
#include "multi_tensor.h"

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
// The element steps are shared by the per-parameter and the multi-tensor
// kernels, so both give the same bits. float16/bfloat16 compute in float
// and round each stored value once.

struct SgdHyper {
  double momentum, dampening, weight_decay;
  bool use_momentum, nesterov, maximize;
};

SgdHyper ReadSgd(const dg::KernelContext& ctx) {
  return SgdHyper{ctx.f("momentum"), ctx.f("dampening"), ctx.f("weight_decay"),
                  ctx.f("momentum") != 0.0, ctx.b("nesterov"), ctx.b("maximize")};
}

template <typename A>
struct SgdCoef {
  A lr, momentum, keep, weight_decay;
  bool nesterov, maximize;
};

template <typename A>
__device__ inline SgdCoef<A> MakeSgdCoef(const SgdHyper& h, Scalar lr) {
  return SgdCoef<A>{static_cast<A>(ReadScalar(lr.p, lr.dtype)), static_cast<A>(h.momentum),
                    static_cast<A>(1.0 - h.dampening), static_cast<A>(h.weight_decay),
                    h.nesterov, h.maximize};
}

// Element i of one parameter (buf/buf_out null without momentum).
template <typename T>
__device__ inline void SgdElem(const SgdCoef<Acc<T>>& c, const T* p, const T* g, const T* buf,
                               T* p_out, T* buf_out, int64_t i) {
  using A = Acc<T>;
  // Every multiply-add is an explicit fma: left to the compiler, contraction
  // differs between the kernels this is inlined into (the per-parameter and
  // the multi-tensor one gave results one ulp apart on the H100).
  A d = c.maximize ? -Load(g[i]) : Load(g[i]);
  if (c.weight_decay != A(0)) d = fma(c.weight_decay, Load(p[i]), d);
  if (buf) {
    const A kd = c.keep * d;
    const A b = fma(c.momentum, Load(buf[i]), kd);
    buf_out[i] = Store<T>(b);
    d = c.nesterov ? fma(c.momentum, b, d) : b;
  }
  p_out[i] = Store<T>(fma(-c.lr, d, Load(p[i])));
}

template <typename T>
struct SgdTensors {
  const T *p, *g, *buf;
  T *p_out, *buf_out;
};

template <typename T>
__global__ void SgdKernel(SgdTensors<T> a, Scalar lr, SgdHyper h, int64_t n) {
  const SgdCoef<Acc<T>> c = MakeSgdCoef<Acc<T>>(h, lr);
  DGC_LOOP(i, n) SgdElem(c, a.p, a.g, a.buf, a.p_out, a.buf_out, i);
}

template <typename T>
void SgdUpdate(dg::KernelContext& ctx) {
  const SgdHyper h = ReadSgd(ctx);
  const int64_t n = h.use_momentum ? CheckedCount(ctx, {1, 2}, {0, 1})
                                   : CheckedCount(ctx, {1}, {0});
  cudaStream_t s = Prepare(ctx);
  if (!h.use_momentum) PassThrough(ctx, 2, 1, s);
  const Scalar lr = CheckScalar(ctx, 3, "lr");
  if (n == 0) return;
  SgdTensors<T> a{};
  a.p = static_cast<const T*>(ctx.input(0).raw_data());
  a.g = static_cast<const T*>(ctx.input(1).raw_data());
  a.buf = h.use_momentum ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
  a.p_out = static_cast<T*>(ctx.output(0).raw_data());
  a.buf_out = h.use_momentum ? static_cast<T*>(ctx.output(1).raw_data()) : nullptr;
  SgdKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, lr, h, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("SgdUpdate", "cuda", 0, DG_KERNEL_INPLACE, SgdUpdate, float, double, half, bf16);

// ------------------------------------------------------------ Adam / AdamW

struct AdamHyper {
  double beta1, beta2, weight_decay, eps;
  bool decoupled, amsgrad, maximize;
};

AdamHyper ReadAdam(const dg::KernelContext& ctx) {
  return AdamHyper{ctx.f("beta1"), ctx.f("beta2"), ctx.f("weight_decay"), ctx.f("eps"),
                   ctx.b("decoupled"), ctx.b("amsgrad"), ctx.b("maximize")};
}

template <typename A>
struct AdamCoef {
  A step_size, bc2_sqrt, eps, b1, omb1, b2, omb2, l2, shrink;
  bool maximize;
};

// The factors of one parameter's step, in double then cast once (as the CPU).
template <typename A>
__device__ inline AdamCoef<A> MakeAdamCoef(const AdamHyper& h, Scalar lr_s, Scalar step_s) {
  const double lr = ReadScalar(lr_s.p, lr_s.dtype), step = ReadScalar(step_s.p, step_s.dtype);
  AdamCoef<A> c;
  c.step_size = static_cast<A>(lr / (1.0 - pow(h.beta1, step)));
  c.bc2_sqrt = static_cast<A>(sqrt(1.0 - pow(h.beta2, step)));
  c.eps = static_cast<A>(h.eps);
  c.b1 = static_cast<A>(h.beta1);
  c.omb1 = static_cast<A>(1 - h.beta1);
  c.b2 = static_cast<A>(h.beta2);
  c.omb2 = static_cast<A>(1 - h.beta2);
  c.l2 = h.decoupled ? A(0) : static_cast<A>(h.weight_decay);
  c.shrink = h.decoupled ? static_cast<A>(1.0 - lr * h.weight_decay) : A(1);
  c.maximize = h.maximize;
  return c;
}

template <typename T>
struct AdamTensors {
  const T *p, *g, *m, *v, *vmax;  // vmax/vmax_out: with amsgrad only
  T *p_out, *m_out, *v_out, *vmax_out;
};

template <typename T>
__device__ inline void AdamElem(const AdamCoef<Acc<T>>& c, const AdamTensors<T>& a, int64_t i) {
  using A = Acc<T>;
  A d = c.maximize ? -Load(a.g[i]) : Load(a.g[i]);
  if (c.l2 != A(0)) d += c.l2 * Load(a.p[i]);
  const A m = c.b1 * Load(a.m[i]) + c.omb1 * d;
  const A v = c.b2 * Load(a.v[i]) + c.omb2 * (d * d);
  a.m_out[i] = Store<T>(m);
  a.v_out[i] = Store<T>(v);
  A den;
  if (a.vmax) {
    const A old = Load(a.vmax[i]);
    const A vm = old > v || old != old ? old : v;
    a.vmax_out[i] = Store<T>(vm);
    den = sqrt(vm) / c.bc2_sqrt + c.eps;
  } else {
    den = sqrt(v) / c.bc2_sqrt + c.eps;
  }
  const A p = Load(a.p[i]);
  a.p_out[i] = Store<T>((c.shrink != A(1) ? p * c.shrink : p) - c.step_size * (m / den));
}

template <typename T>
__global__ void AdamKernel(AdamTensors<T> a, Scalar lr, Scalar step, AdamHyper h, int64_t n) {
  const AdamCoef<Acc<T>> c = MakeAdamCoef<Acc<T>>(h, lr, step);
  DGC_LOOP(i, n) AdamElem(c, a, i);
}

template <typename T>
void AdamUpdate(dg::KernelContext& ctx) {
  const AdamHyper h = ReadAdam(ctx);
  const int64_t n = h.amsgrad ? CheckedCount(ctx, {1, 2, 3, 4}, {0, 1, 2, 3})
                              : CheckedCount(ctx, {1, 2, 3}, {0, 1, 2});
  cudaStream_t s = Prepare(ctx);
  if (!h.amsgrad) PassThrough(ctx, 4, 3, s);
  const Scalar lr = CheckScalar(ctx, 5, "lr");
  // step >= 1 is checked by the CPU kernel on the host; here it is read on
  // the device, where a step < 1 gives the same formula's value.
  const Scalar step = CheckScalar(ctx, 6, "step");
  if (n == 0) return;
  AdamTensors<T> a{};
  a.p = static_cast<const T*>(ctx.input(0).raw_data());
  a.g = static_cast<const T*>(ctx.input(1).raw_data());
  a.m = static_cast<const T*>(ctx.input(2).raw_data());
  a.v = static_cast<const T*>(ctx.input(3).raw_data());
  a.vmax = h.amsgrad ? static_cast<const T*>(ctx.input(4).raw_data()) : nullptr;
  a.p_out = static_cast<T*>(ctx.output(0).raw_data());
  a.m_out = static_cast<T*>(ctx.output(1).raw_data());
  a.v_out = static_cast<T*>(ctx.output(2).raw_data());
  a.vmax_out = h.amsgrad ? static_cast<T*>(ctx.output(3).raw_data()) : nullptr;
  AdamKernel<T><<<Blocks(n), kThreads, 0, s>>>(a, lr, step, h, n);
  CheckLaunch(ctx);
}
DG_KERNEL_EX("AdamUpdate", "cuda", 0, DG_KERNEL_INPLACE, AdamUpdate, float, double, half, bf16);

// ------------------------------------------------------------ multi-tensor
// MultiSgdUpdate / MultiAdamUpdate: one launch over every parameter of the
// call. A table of the parameters (pointers, element count, first chunk)
// is copied to a device workspace; each parameter's elements are cut into
// chunks of kChunk, and block b finds its parameter by binary search over
// the first chunks (AssignChunks / FindSlot in multi_tensor.h, tested on the
// host). Each element runs the per-parameter kernel's step: the same bits.

template <typename Tensors>
struct Slot {
  Tensors t;
  Scalar step;  // Adam's step count of this parameter (unused by SGD)
  int64_t n, first_chunk;
};

template <typename T>
__global__ void MultiSgdKernel(const Slot<SgdTensors<T>>* slots, int32_t count, int64_t chunks,
                               Scalar lr, SgdHyper h) {
  const SgdCoef<Acc<T>> c = MakeSgdCoef<Acc<T>>(h, lr);
  for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
    const Slot<SgdTensors<T>>& s = slots[FindSlot(slots, count, b)];
    const int64_t begin = (b - s.first_chunk) * kChunk;
    const int64_t end = begin + kChunk < s.n ? begin + kChunk : s.n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      SgdElem(c, s.t.p, s.t.g, s.t.buf, s.t.p_out, s.t.buf_out, i);
  }
}

template <typename T>
__global__ void MultiAdamKernel(const Slot<AdamTensors<T>>* slots, int32_t count, int64_t chunks,
                                Scalar lr, AdamHyper h) {
  for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
    const Slot<AdamTensors<T>>& s = slots[FindSlot(slots, count, b)];
    const AdamCoef<Acc<T>> c = MakeAdamCoef<Acc<T>>(h, lr, s.step);
    const int64_t begin = (b - s.first_chunk) * kChunk;
    const int64_t end = begin + kChunk < s.n ? begin + kChunk : s.n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) AdamElem(c, s.t, i);
  }
}

// The number n of parameters of a call with `roles` inputs per parameter
// after input `first`, and `out_roles` outputs per parameter.
int32_t MultiN(const dg::KernelContext& ctx, int32_t first, int32_t roles, int32_t out_roles) {
  const int32_t total = ctx.num_inputs() - first;
  DG_CHECK(total > 0 && total % roles == 0 && ctx.num_outputs() == total / roles * out_roles,
           DG_INTERNAL, ctx.op_name(), ": ", total, " tensors and ", ctx.num_outputs(),
           " outputs do not make whole parameters");
  return total / roles;
}

// Checks that the used roles of parameter k (inputs first + r*n + k,
// outputs r*n + k) hold params[k]'s element count, and returns it.
int64_t MultiCount(const dg::KernelContext& ctx, int32_t first, int32_t n, int32_t k,
                   std::initializer_list<int32_t> roles, std::initializer_list<int32_t> outs) {
  const int64_t count = ctx.input(first + k).numel();
  for (int32_t r : roles)
    DG_CHECK(ctx.input(first + r * n + k).numel() == count, DG_INTERNAL, ctx.op_name(),
             ": tensor ", r * n + k, " has ", ctx.input(first + r * n + k).numel(),
             " elements, params[", k, "] has ", count);
  for (int32_t r : outs)
    DG_CHECK(ctx.output(r * n + k).numel() == count, DG_INTERNAL, ctx.op_name(), ": output ",
             r * n + k, " has ", ctx.output(r * n + k).numel(), " elements, params[", k,
             "] has ", count);
  return count;
}

// Up to kTableWords 8-byte words of the parameter table, passed by value as
// a kernel argument (under the classic 4 KiB parameter limit with the other
// two arguments).
constexpr int32_t kTableWords = 496;
struct TableWords {
  uint64_t w[kTableWords];
};

__global__ void WriteTableKernel(uint64_t* dst, TableWords words, int32_t count) {
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < count;
       i += static_cast<int32_t>(blockDim.x))
    dst[i] = words.w[i];
}

// Writes the table to a device workspace through kernel arguments (one
// launch per 3,968 bytes) and launches `launch(device_slots, chunks)`. Not
// a cudaMemcpyAsync from the host vector: a CUDA Graph recording that copy
// would read the vector's (long freed) address at every replay, whereas a
// kernel node keeps its arguments (docs/cuda.md, "CUDA Graphs").
template <typename Tensors, typename Launch>
void RunSlots(dg::KernelContext& ctx, std::vector<Slot<Tensors>>* slots, cudaStream_t s,
              Launch launch) {
  static_assert(sizeof(Slot<Tensors>) % sizeof(uint64_t) == 0,
                "a table slot must be a whole number of 8-byte words");
  const int64_t chunks = AssignChunks(slots);
  if (chunks == 0) return;
  Slot<Tensors>* table = ctx.workspace<Slot<Tensors>>(slots->size());
  const size_t words = slots->size() * sizeof(Slot<Tensors>) / sizeof(uint64_t);
  const unsigned char* src = reinterpret_cast<const unsigned char*>(slots->data());
  uint64_t* dst = reinterpret_cast<uint64_t*>(table);
  for (size_t done = 0; done < words; done += kTableWords) {
    const int32_t n = static_cast<int32_t>(words - done < static_cast<size_t>(kTableWords)
                                               ? words - done
                                               : static_cast<size_t>(kTableWords));
    TableWords part;
    std::memcpy(part.w, src + done * sizeof(uint64_t), static_cast<size_t>(n) * sizeof(uint64_t));
    WriteTableKernel<<<1, 256, 0, s>>>(dst + done, part, n);
  }
  CheckLaunch(ctx);
  launch(static_cast<const Slot<Tensors>*>(table), chunks);
  CheckLaunch(ctx);
}

template <typename T>
void MultiSgdUpdate(dg::KernelContext& ctx) {
  const int32_t n = MultiN(ctx, 1, 3, 2);
  const SgdHyper h = ReadSgd(ctx);
  cudaStream_t s = Prepare(ctx);
  const Scalar lr = CheckScalar(ctx, 0, "lr");
  std::vector<Slot<SgdTensors<T>>> slots(static_cast<size_t>(n));
  auto in = [&](int32_t i) { return static_cast<const T*>(ctx.input(1 + i).raw_data()); };
  auto out = [&](int32_t i) { return static_cast<T*>(ctx.output(i).raw_data()); };
  for (int32_t k = 0; k < n; ++k) {
    Slot<SgdTensors<T>>& sl = slots[static_cast<size_t>(k)];
    if (h.use_momentum) {
      sl.n = MultiCount(ctx, 1, n, k, {1, 2}, {0, 1});
      sl.t = SgdTensors<T>{in(k), in(n + k), in(2 * n + k), out(k), out(n + k)};
    } else {
      sl.n = MultiCount(ctx, 1, n, k, {1}, {0});
      PassThrough(ctx, 1 + 2 * n + k, n + k, s);
      sl.t = SgdTensors<T>{in(k), in(n + k), nullptr, out(k), nullptr};
    }
  }
  RunSlots(ctx, &slots, s, [&](const Slot<SgdTensors<T>>* table, int64_t chunks) {
    MultiSgdKernel<T><<<ChunkBlocks(chunks), kThreads, 0, s>>>(table, n, chunks, lr, h);
  });
}
DG_KERNEL("MultiSgdUpdate", "cuda", MultiSgdUpdate, float, double, half, bf16);

template <typename T>
void MultiAdamUpdate(dg::KernelContext& ctx) {
  const int32_t n = MultiN(ctx, 1, 6, 4);
  const AdamHyper h = ReadAdam(ctx);
  cudaStream_t s = Prepare(ctx);
  const Scalar lr = CheckScalar(ctx, 0, "lr");
  std::vector<Slot<AdamTensors<T>>> slots(static_cast<size_t>(n));
  auto in = [&](int32_t i) { return static_cast<const T*>(ctx.input(1 + i).raw_data()); };
  auto out = [&](int32_t i) { return static_cast<T*>(ctx.output(i).raw_data()); };
  for (int32_t k = 0; k < n; ++k) {
    Slot<AdamTensors<T>>& sl = slots[static_cast<size_t>(k)];
    sl.step = CheckScalar(ctx, 1 + 5 * n + k, "steps");
    AdamTensors<T>& t = sl.t;
    t.p = in(k);
    t.g = in(n + k);
    t.m = in(2 * n + k);
    t.v = in(3 * n + k);
    t.p_out = out(k);
    t.m_out = out(n + k);
    t.v_out = out(2 * n + k);
    if (h.amsgrad) {
      sl.n = MultiCount(ctx, 1, n, k, {1, 2, 3, 4}, {0, 1, 2, 3});
      t.vmax = in(4 * n + k);
      t.vmax_out = out(3 * n + k);
    } else {
      sl.n = MultiCount(ctx, 1, n, k, {1, 2, 3}, {0, 1, 2});
      PassThrough(ctx, 1 + 4 * n + k, 3 * n + k, s);
      t.vmax = nullptr;
      t.vmax_out = nullptr;
    }
  }
  RunSlots(ctx, &slots, s, [&](const Slot<AdamTensors<T>>* table, int64_t chunks) {
    MultiAdamKernel<T><<<ChunkBlocks(chunks), kThreads, 0, s>>>(table, n, chunks, lr, h);
  });
}
DG_KERNEL("MultiAdamUpdate", "cuda", MultiAdamUpdate, float, double, half, bf16);

// ------------------------------------------------------------ RMSprop

template <typename T>
struct RmspropArgs {
  const T *p, *g, *sq, *buf, *avg;
  T *p_out, *sq_out, *buf_out, *avg_out;
  Scalar lr;
  Acc<T> alpha, one_minus_alpha, eps, weight_decay, momentum;  // float for 16-bit T
  bool maximize;
};

template <typename T>
__global__ void RmspropKernel(RmspropArgs<T> a, int64_t n) {
  using A = Acc<T>;
  const A lr = static_cast<A>(ReadScalar(a.lr.p, a.lr.dtype));
  DGC_LOOP(i, n) {
    A d = a.maximize ? -Load(a.g[i]) : Load(a.g[i]);
    if (a.weight_decay != A(0)) d += a.weight_decay * Load(a.p[i]);
    const A sq = a.alpha * Load(a.sq[i]) + a.one_minus_alpha * (d * d);
    a.sq_out[i] = Store<T>(sq);
    A den;
    if (a.avg) {
      const A av = a.alpha * Load(a.avg[i]) + a.one_minus_alpha * d;
      a.avg_out[i] = Store<T>(av);
      den = sqrt(sq - av * av) + a.eps;
    } else {
      den = sqrt(sq) + a.eps;
    }
    if (a.buf) {
      const A b = a.momentum * Load(a.buf[i]) + d / den;
      a.buf_out[i] = Store<T>(b);
      a.p_out[i] = Store<T>(Load(a.p[i]) - lr * b);
    } else {
      a.p_out[i] = Store<T>(Load(a.p[i]) - lr * (d / den));
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
  using A = Acc<T>;
  a.alpha = static_cast<A>(ctx.f("alpha"));
  a.one_minus_alpha = static_cast<A>(1.0 - ctx.f("alpha"));
  a.eps = static_cast<A>(ctx.f("eps"));
  a.weight_decay = static_cast<A>(ctx.f("weight_decay"));
  a.momentum = static_cast<A>(ctx.f("momentum"));
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
DG_KERNEL_EX("RmspropUpdate", "cuda", 0, DG_KERNEL_INPLACE, RmspropUpdate, float, double, half,
             bf16);

// ------------------------------------------------------------ Adagrad

template <typename T>
__global__ void AdagradKernel(const T* p, const T* g, const T* sum, T* p_out, T* sum_out,
                              int64_t n, Scalar lr_s, Scalar step_s, double lr_decay,
                              Acc<T> eps, Acc<T> weight_decay, bool maximize) {
  using A = Acc<T>;
  const double lr = ReadScalar(lr_s.p, lr_s.dtype), step = ReadScalar(step_s.p, step_s.dtype);
  const A clr = static_cast<A>(lr / (1.0 + (step - 1.0) * lr_decay));
  DGC_LOOP(i, n) {
    A d = maximize ? -Load(g[i]) : Load(g[i]);
    if (weight_decay != A(0)) d += weight_decay * Load(p[i]);
    const A s2 = Load(sum[i]) + d * d;
    sum_out[i] = Store<T>(s2);
    p_out[i] = Store<T>(Load(p[i]) - clr * (d / (sqrt(s2) + eps)));
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
      static_cast<Acc<T>>(ctx.f("eps")), static_cast<Acc<T>>(ctx.f("weight_decay")),
      ctx.b("maximize"));
  CheckLaunch(ctx);
}
DG_KERNEL_EX("AdagradUpdate", "cuda", 0, DG_KERNEL_INPLACE, AdagradUpdate, float, double, half,
             bf16);

}  // namespace
}  // namespace dragon_cuda
