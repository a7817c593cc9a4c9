// BatchNorm and BatchNormGrad on cuda with cpu_eigen's semantics (norm.cc):
// x viewed as [N, C, S]; per channel the batch mean and biased variance
// (training) or the running statistics (inference); y = (x - mean) * gamma
// * rstd + beta with rstd = 1/sqrt(var + eps). The gradient is dx = a dy +
// b (x - mean) + k per channel (see norm.cc for a, b, k).
//
// Throughput: every kernel cuts each channel into chunks of one block
// (ChannelCut, index_math.h: C * parts blocks, so 64 channels of 200k
// values still fill all SMs) and reads 16-byte vectors where S and the
// pointers allow. Statistics are one pass: each thread keeps Welford
// running moments in float (double for float64: stable whatever the mean,
// over the few dozen values a thread sees), blocks merge them in double
// with Chan et al.'s pairwise formulas, and a one-warp-per-channel kernel
// merges the blocks' partials in a fixed order and turns them into the
// per-channel coefficients of the element-wise pass (float for float and
// the 16-bit types, as the element math always was). No atomics: the same
// bits every run. The gradient's one statistics pass also gathers dy's
// mean and the co-moment sum (x - mean_x)(dy - mean_dy), from which sum(dy)
// and sum(dy (x - mean)) follow, so x and dy are read twice in all (not
// four times). float16/bfloat16: x, parameters and statistics all of x's
// dtype, as the schema asks.
//
// Channels-last (docs/cuda.md): BatchNorm and BatchNormGrad declare
// DG_KERNEL_CHANNELS_LAST. A channels-last x ([N, C, *] with channel
// innermost) is, in memory, rows [M = N * prod(*), C]: its statistics run
// over column tiles (a warp reads 32 neighbouring channels of one row) and
// merge into the same per-channel partials, so StatsFinal and GradFinal
// serve both layouts; the element-wise passes index the channel as i % C.
// An operand in the other layout than x (dy, or a planned row-major
// output) is staged through the workspace.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cudnn_plan.h"
#include "elementwise.cuh"
#include "index_math.h"

namespace dragon_cuda {
namespace {

struct NCS {
  int64_t n, c, s;
};

NCS View(const dg::TensorRef& x) {
  NCS v{x.dim(0), x.dim(1), 1};
  for (int32_t i = 2; i < x.ndim(); ++i) v.s *= x.dim(i);
  return v;
}

__device__ double Sum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

unsigned ChannelBlocks(int64_t c) {
  return static_cast<unsigned>(c < 65535LL * 16 ? (c > 0 ? c : 1) : 65535LL * 16);
}

// ------------------------------------------------------------ moments

template <typename A>
__device__ inline A Recip(A n) {
  if constexpr (std::is_same<A, float>::value) {
    return __frcp_rn(n);
  } else {
    return A(1) / n;
  }
}

// One thread's running moments (Welford's update) of x and, for the
// gradient, of dy: count, means, sum (x - mx)^2 and sum (x - mx)(dy - my).
template <typename A>
struct Running {
  A n = 0, mx = 0, m2 = 0, my = 0, cxy = 0;
  __device__ void Add(A x) {
    n += A(1);
    const A d = x - mx;
    mx += d * Recip(n);
    m2 += d * (x - mx);
  }
  __device__ void Add(A x, A y) {
    n += A(1);
    const A inv = Recip(n);
    const A d = x - mx, e = y - my;
    mx += d * inv;
    my += e * inv;
    m2 += d * (x - mx);
    cxy += d * (y - my);
  }
};

// The same moments in double, merged pairwise (Chan, Golub and LeVeque).
struct Moments {
  double n, mx, m2, my, cxy;
};
constexpr int kMomentFields = 5;

__device__ inline Moments Merge(const Moments& a, const Moments& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  Moments r;
  r.n = a.n + b.n;
  const double f = b.n / r.n, w = a.n * f;  // w = na nb / n
  const double dx = b.mx - a.mx, dy = b.my - a.my;
  r.mx = a.mx + dx * f;
  r.my = a.my + dy * f;
  r.m2 = a.m2 + b.m2 + dx * dx * w;
  r.cxy = a.cxy + b.cxy + dx * dy * w;
  return r;
}

__device__ inline Moments ShflDown(const Moments& m, int off) {
  Moments r;
  r.n = __shfl_down_sync(0xffffffffu, m.n, off);
  r.mx = __shfl_down_sync(0xffffffffu, m.mx, off);
  r.m2 = __shfl_down_sync(0xffffffffu, m.m2, off);
  r.my = __shfl_down_sync(0xffffffffu, m.my, off);
  r.cxy = __shfl_down_sync(0xffffffffu, m.cxy, off);
  return r;
}

// A fixed shuffle tree over the warp; lane 0 gets the merge of all lanes.
__device__ inline Moments WarpMerge(Moments m) {
  for (int off = 16; off > 0; off >>= 1) m = Merge(m, ShflDown(m, off));
  return m;
}

// Chunk j of channel ch for this block: units [lo, hi).
struct Chunk {
  int64_t ch, lo, hi;
};

__device__ inline Chunk BlockChunk(const ChannelCut& k) {
  Chunk q;
  q.ch = blockIdx.x / k.parts;
  const int64_t j = blockIdx.x % k.parts;
  q.lo = j * k.per;
  q.hi = q.lo + k.per < k.units ? q.lo + k.per : k.units;
  return q;
}

// Per block: the moments of its chunk (of x, and of dy when kGrad), written
// to part[(ch * parts + j) * kMomentFields ...].
template <typename T, int V, bool kGrad>
__global__ void PartialMoments(const T* x, const T* dy, ChannelCut k, double* part) {
  using A = Acc<T>;
  __shared__ Moments warps[kThreads / 32];
  const Chunk q = BlockChunk(k);
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  const auto* yv = reinterpret_cast<const Vec<T, V>*>(dy);
  Running<A> r;
  for (int64_t u = q.lo + threadIdx.x; u < q.hi; u += blockDim.x) {
    const int64_t off = k.Offset(q.ch, u);
    const Vec<T, V> a = xv[off];
    if constexpr (kGrad) {
      const Vec<T, V> b = yv[off];
#pragma unroll
      for (int t = 0; t < V; ++t) r.Add(Load(a.v[t]), Load(b.v[t]));
    } else {
#pragma unroll
      for (int t = 0; t < V; ++t) r.Add(Load(a.v[t]));
    }
  }
  Moments m{static_cast<double>(r.n), static_cast<double>(r.mx), static_cast<double>(r.m2),
            static_cast<double>(r.my), static_cast<double>(r.cxy)};
  m = WarpMerge(m);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < static_cast<int>(blockDim.x >> 5) ? warps[lane] : Moments{0, 0, 0, 0, 0};
    m = WarpMerge(m);
    if (lane == 0) {
      double* p = part + (q.ch * k.parts + (blockIdx.x % k.parts)) * kMomentFields;
      p[0] = m.n;
      p[1] = m.mx;
      p[2] = m.m2;
      p[3] = m.my;
      p[4] = m.cxy;
    }
  }
}

// Channel ch's moments from its `parts` partials, merged in a fixed order
// (lane l takes parts l, l + 32, ..., then the shuffle tree): lane 0's.
__device__ inline Moments ChannelMoments(const double* part, int64_t ch, int64_t parts,
                                         int lane) {
  Moments m{0, 0, 0, 0, 0};
  for (int64_t j = lane; j < parts; j += 32) {
    const double* p = part + (ch * parts + j) * kMomentFields;
    m = Merge(m, Moments{p[0], p[1], p[2], p[3], p[4]});
  }
  return WarpMerge(m);
}

// One warp per channel (blockDim a multiple of 32, so a warp exits whole).
__device__ inline int64_t WarpChannel() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}

unsigned WarpBlocks(int64_t c) {
  return static_cast<unsigned>((c * 32 + kThreads - 1) / kThreads);
}

// ------------------------------------------------------------ channels-last

// Whether t ([N, C, *], rank 4 or 5) is channels-last and not also
// row-major: its strides are those of the dense [N, *, C] layout.
bool StrictlyChannelsLast(const dg::TensorRef& t) {
  if (t.ndim() != 4 && t.ndim() != 5) return false;
  if (t.is_contiguous()) return false;
  int64_t expected = 1;
  auto step = [&](int32_t d) {
    if (t.dim(d) != 1 && t.stride(d) != expected) return false;
    expected *= t.dim(d);
    return true;
  };
  if (!step(1)) return false;
  for (int32_t d = t.ndim() - 1; d >= 2; --d)
    if (!step(d)) return false;
  return step(0);
}

// Whether t is dense in the layout `nhwc` (channel innermost) or row-major.
bool DenseIn(const dg::TensorRef& t, bool nhwc) {
  return nhwc ? (StrictlyChannelsLast(t) || t.numel() == 0 ||
                 (t.is_contiguous() && (t.dim(1) == 1 || t.numel() == t.dim(0) * t.dim(1))))
              : t.is_contiguous();
}

// Rows [rows, c] cut into `parts` runs of `per` rows (one grid row each).
struct RowCut {
  int64_t rows = 0, c = 0, parts = 1, per = 0;
};

constexpr int kColTile = 32, kRowTile = kThreads / kColTile;

RowCut MakeRowCut(int64_t rows, int64_t c) {
  RowCut k;
  k.rows = rows;
  k.c = c;
  const int64_t chunk = kRowTile * kCutUnitsPerThread;
  const int64_t want = (rows + chunk - 1) / chunk;
  k.parts = want < 1 ? 1 : (want > kCutMaxParts ? kCutMaxParts : want);
  k.per = (rows + k.parts - 1) / k.parts;
  return k;
}

dim3 RowGrid(const RowCut& k) {
  return dim3(static_cast<unsigned>((k.c + kColTile - 1) / kColTile),
              static_cast<unsigned>(k.parts));
}

// Block (kColTile, kRowTile) of grid (column tiles, parts): the moments of
// its channels over its run of rows, in the partials layout of
// PartialMoments (part[(ch * parts + j) * kMomentFields ...]).
template <typename T, bool kGrad>
__global__ void PartialMomentsRows(const T* x, const T* dy, RowCut k, double* part) {
  using A = Acc<T>;
  __shared__ Moments tile[kRowTile][kColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  const int64_t j = blockIdx.y;
  const int64_t lo = j * k.per, hi = lo + k.per < k.rows ? lo + k.per : k.rows;
  Running<A> r;
  if (ch < k.c) {
    for (int64_t row = lo + ty; row < hi; row += kRowTile) {
      const int64_t off = row * k.c + ch;
      if constexpr (kGrad) {
        r.Add(Load(x[off]), Load(dy[off]));
      } else {
        r.Add(Load(x[off]));
      }
    }
  }
  tile[ty][tx] = Moments{static_cast<double>(r.n), static_cast<double>(r.mx),
                         static_cast<double>(r.m2), static_cast<double>(r.my),
                         static_cast<double>(r.cxy)};
  __syncthreads();
  if (ty != 0 || ch >= k.c) return;
  Moments m = tile[0][tx];
  for (int t = 1; t < kRowTile; ++t) m = Merge(m, tile[t][tx]);  // fixed order
  double* p = part + (ch * k.parts + j) * kMomentFields;
  p[0] = m.n;
  p[1] = m.mx;
  p[2] = m.m2;
  p[3] = m.my;
  p[4] = m.cxy;
}

template <typename T>
__global__ void ApplyRows(const T* x, const Acc<T>* coef, T* y, int64_t total, int64_t c) {
  using A = Acc<T>;
  DGC_LOOP(i, total) {
    const int64_t ch = i % c;
    const A m = coef[3 * ch], a = coef[3 * ch + 1], b = coef[3 * ch + 2];
    y[i] = Store<T>((Load(x[i]) - m) * a + b);
  }
}

template <typename T>
__global__ void GradApplyRows(const T* x, const T* dy, const Acc<T>* coef, T* dx, int64_t total,
                              int64_t c) {
  using A = Acc<T>;
  DGC_LOOP(i, total) {
    const int64_t ch = i % c;
    const A mean = coef[4 * ch], a = coef[4 * ch + 1], b = coef[4 * ch + 2],
            shift = coef[4 * ch + 3];
    dx[i] = Store<T>(a * Load(dy[i]) + b * (Load(x[i]) - mean) + shift);
  }
}

// dst = src ([N, C, S] dense) in the other layout: to_rows makes [N, S, C].
template <typename T>
__global__ void RelayoutNcs(const T* src, T* dst, int64_t total, int64_t c, int64_t s,
                            bool to_rows) {
  DGC_LOOP(i, total) { dst[i] = src[cudnn_plan::RelayoutSource(i, c, 1, s, to_rows)]; }
}

// A copy of t in the layout `rows` (channel innermost) or row-major, in
// workspace memory `buf`; returns buf.
template <typename T>
T* Restage(dg::KernelContext& ctx, const dg::TensorRef& t, const T* from, T* buf, bool rows) {
  const NCS v = View(t);
  const int64_t total = t.numel();
  if (total > 0) {
    RelayoutNcs<T><<<Blocks(total), kThreads, 0, Prepare(ctx)>>>(from, buf, total, v.c, v.s,
                                                                  rows);
    CheckLaunch(ctx);
  }
  return buf;
}

// ------------------------------------------------------------ BatchNorm

// The channel's statistics and the coefficients of y = (x - m) a + b.
template <typename T>
__global__ void StatsFinal(const double* part, const T* gamma, const T* beta, const T* rmean,
                           const T* rvar, int64_t channels, int64_t parts, bool training,
                           double eps, T* out_mean, T* out_var, Acc<T>* coef) {
  using A = Acc<T>;
  const int64_t ch = WarpChannel();
  if (ch >= channels) return;
  const int lane = threadIdx.x & 31;
  double mean, var;
  if (training) {
    const Moments m = ChannelMoments(part, ch, parts, lane);
    mean = m.n > 0 ? m.mx : nan("");
    var = m.n > 0 ? m.m2 / m.n : nan("");
  } else {
    mean = ToDouble(rmean[ch]);
    var = ToDouble(rvar[ch]);
  }
  if (lane != 0) return;
  out_mean[ch] = training ? FromDouble<T>(mean) : rmean[ch];
  out_var[ch] = training ? FromDouble<T>(var) : rvar[ch];
  const double scale = ToDouble(gamma[ch]) * (1.0 / sqrt(var + eps));
  coef[3 * ch] = static_cast<A>(mean);
  coef[3 * ch + 1] = static_cast<A>(scale);
  coef[3 * ch + 2] = Load(beta[ch]);
}

template <typename T, int V>
__global__ void Apply(const T* x, const Acc<T>* coef, T* y, ChannelCut k) {
  using A = Acc<T>;
  const Chunk q = BlockChunk(k);
  const A m = coef[3 * q.ch], a = coef[3 * q.ch + 1], b = coef[3 * q.ch + 2];
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  auto* yv = reinterpret_cast<Vec<T, V>*>(y);
  for (int64_t u = q.lo + threadIdx.x; u < q.hi; u += blockDim.x) {
    const int64_t off = k.Offset(q.ch, u);
    const Vec<T, V> in = xv[off];
    Vec<T, V> out;
#pragma unroll
    for (int t = 0; t < V; ++t) out.v[t] = Store<T>((Load(in.v[t]) - m) * a + b);
    yv[off] = out;
  }
}

// The cut of x (and the tensors read or written with it): 16-byte vectors
// when every pointer is aligned and S allows.
template <typename T>
ChannelCut CutFor(const dg::KernelContext& ctx, const NCS& v,
                  std::initializer_list<const void*> ptrs) {
  bool aligned = true;
  for (const void* p : ptrs) aligned = aligned && Aligned16(p);
  const ChannelCut k = MakeChannelCut(v.n, v.c, v.s, aligned ? kVec16<T> : 1, kThreads);
  DG_CHECK(k.c * k.parts <= INT32_MAX, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", v.c,
           " channels are too many for one launch");
  return k;
}

// Calls f(std::integral_constant<int, V>) with the cut's vector width.
template <typename T, typename F>
void WithVec(const ChannelCut& k, F&& f) {
  if (k.vec == kVec16<T>) {
    f(std::integral_constant<int, kVec16<T>>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// BatchNorm over a channels-last x ([M, C] rows in memory).
template <typename T>
void BatchNormRows(dg::KernelContext& ctx, const dg::TensorRef& xt, const T* x, T* y,
                   bool training) {
  using A = Acc<T>;
  cudaStream_t s = Prepare(ctx);
  const dg::TensorRef yt = ctx.output(0);
  const int64_t c = xt.dim(1), total = xt.numel();
  const RowCut k = MakeRowCut(c > 0 ? total / c : 0, c);
  DG_CHECK((c + kColTile - 1) / kColTile <= 2147483647LL, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": ", c, " channels are too many for one launch");
  double* part = nullptr;
  if (training) {
    part = ctx.workspace<double>(static_cast<size_t>(k.c * k.parts * kMomentFields));
    PartialMomentsRows<T, false><<<RowGrid(k), dim3(kColTile, kRowTile), 0, s>>>(x, nullptr, k,
                                                                                 part);
    CheckLaunch(ctx);
  }
  A* coef = ctx.workspace<A>(static_cast<size_t>(3 * c));
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  StatsFinal<T><<<WarpBlocks(c), kThreads, 0, s>>>(
      part, in(1), in(2), in(3), in(4), c, k.parts, training, ctx.f("eps"),
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()),
      coef);
  CheckLaunch(ctx);
  if (total == 0) return;
  // A row-major output (a compiled plan's buffer): computed in rows, then
  // copied out.
  const bool stage = !DenseIn(yt, true);
  T* out = stage ? ctx.workspace<T>(static_cast<size_t>(total)) : y;
  ApplyRows<T><<<Blocks(total), kThreads, 0, s>>>(x, coef, out, total, c);
  CheckLaunch(ctx);
  if (stage) Restage<T>(ctx, yt, out, y, false);
}

template <typename T>
void BatchNorm(dg::KernelContext& ctx) {
  using A = Acc<T>;
  const dg::TensorRef xt = ctx.input(0);
  DG_CHECK(xt.ndim() >= 2, DG_INVALID_ARGUMENT, ctx.op_name(), ": x must be [N, C, *], got ",
           dg::ShapeStr(xt.shape()));
  const NCS v = View(xt);
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  const bool training = ctx.b("training");
  const T* x = static_cast<const T*>(xt.raw_data());
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  if (StrictlyChannelsLast(xt)) {
    BatchNormRows<T>(ctx, xt, x, y, training);
    return;
  }
  const ChannelCut k = CutFor<T>(ctx, v, {x, y});
  const unsigned blocks = static_cast<unsigned>(k.c * k.parts);
  double* part = nullptr;
  if (training) {
    part = ctx.workspace<double>(static_cast<size_t>(k.c * k.parts * kMomentFields));
    WithVec<T>(k, [&](auto vec) {
      PartialMoments<T, decltype(vec)::value, false><<<blocks, kThreads, 0, s>>>(x, nullptr, k,
                                                                                  part);
    });
    CheckLaunch(ctx);
  }
  A* coef = ctx.workspace<A>(static_cast<size_t>(3 * v.c));
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  StatsFinal<T><<<WarpBlocks(v.c), kThreads, 0, s>>>(
      part, in(1), in(2), in(3), in(4), v.c, k.parts, training, ctx.f("eps"),
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()),
      coef);
  CheckLaunch(ctx);
  if (k.units == 0) return;
  WithVec<T>(k, [&](auto vec) {
    Apply<T, decltype(vec)::value><<<blocks, kThreads, 0, s>>>(x, coef, y, k);
  });
  CheckLaunch(ctx);
}
DG_KERNEL_EX("BatchNorm", "cuda", 0, DG_KERNEL_CHANNELS_LAST, BatchNorm, float, double, half,
             bf16);

// ------------------------------------------------------------ BatchNormGrad

// Per channel: dgamma, dbeta and the coefficients of dx = a dy + b (x - m)
// + k from the moments of x and dy (training) or the running statistics.
template <typename T>
__global__ void GradFinal(const double* part, const T* gamma, const T* rmean, const T* rvar,
                          const T* dmean, const T* dvar, int64_t channels, int64_t parts,
                          bool training, double eps, T* dgamma, T* dbeta, Acc<T>* coef) {
  using A = Acc<T>;
  const int64_t ch = WarpChannel();
  if (ch >= channels) return;
  const Moments mo = ChannelMoments(part, ch, parts, threadIdx.x & 31);
  if ((threadIdx.x & 31) != 0) return;
  const double m = mo.n;
  const double sum_dy = mo.my * mo.n;
  double mean, var, sum_dy_xc;  // sum_dy_xc = sum dy (x - mean)
  if (training) {
    mean = m > 0 ? mo.mx : nan("");
    var = m > 0 ? mo.m2 / m : nan("");
    sum_dy_xc = mo.cxy;  // sum (dy - my)(x - mx) = sum dy (x - mx)
  } else {
    mean = ToDouble(rmean[ch]);
    var = ToDouble(rvar[ch]);
    sum_dy_xc = mo.cxy + (mo.mx - mean) * sum_dy;
  }
  const double rstd = 1.0 / sqrt(var + eps);
  const double gr = ToDouble(gamma[ch]) * rstd;
  const double dgv = m == 0 ? 0.0 : sum_dy_xc * rstd;
  dgamma[ch] = FromDouble<T>(dgv);
  dbeta[ch] = FromDouble<T>(sum_dy);
  coef[4 * ch] = static_cast<A>(mean);
  coef[4 * ch + 1] = static_cast<A>(gr);
  if (training && m > 0) {
    coef[4 * ch + 2] = static_cast<A>((2.0 * ToDouble(dvar[ch]) - gr * rstd * dgv) / m);
    coef[4 * ch + 3] = static_cast<A>((ToDouble(dmean[ch]) - gr * sum_dy) / m);
  } else {
    coef[4 * ch + 2] = coef[4 * ch + 3] = A(0);
  }
}

template <typename T, int V>
__global__ void GradApply(const T* x, const T* dy, const Acc<T>* coef, T* dx, ChannelCut k) {
  using A = Acc<T>;
  const Chunk q = BlockChunk(k);
  const A mean = coef[4 * q.ch], a = coef[4 * q.ch + 1], b = coef[4 * q.ch + 2],
          shift = coef[4 * q.ch + 3];
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  const auto* yv = reinterpret_cast<const Vec<T, V>*>(dy);
  auto* ov = reinterpret_cast<Vec<T, V>*>(dx);
  for (int64_t u = q.lo + threadIdx.x; u < q.hi; u += blockDim.x) {
    const int64_t off = k.Offset(q.ch, u);
    const Vec<T, V> xi = xv[off], gi = yv[off];
    Vec<T, V> out;
#pragma unroll
    for (int t = 0; t < V; ++t)
      out.v[t] = Store<T>(a * Load(gi.v[t]) + b * (Load(xi.v[t]) - mean) + shift);
    ov[off] = out;
  }
}

// BatchNormGrad over a channels-last x ([M, C] rows in memory); dy and dx
// are staged when they are row-major.
template <typename T>
void BatchNormGradRows(dg::KernelContext& ctx, const dg::TensorRef& xt, const T* x, const T* dy,
                       T* dx) {
  using A = Acc<T>;
  cudaStream_t s = Prepare(ctx);
  const dg::TensorRef dyt = ctx.input(4), dxt = ctx.output(0);
  const int64_t c = xt.dim(1), total = xt.numel();
  if (total > 0 && !DenseIn(dyt, true))
    dy = Restage<T>(ctx, dyt, dy, ctx.workspace<T>(static_cast<size_t>(total)), true);
  const RowCut k = MakeRowCut(c > 0 ? total / c : 0, c);
  double* part = ctx.workspace<double>(static_cast<size_t>(k.c * k.parts * kMomentFields));
  PartialMomentsRows<T, true><<<RowGrid(k), dim3(kColTile, kRowTile), 0, s>>>(x, dy, k, part);
  CheckLaunch(ctx);
  A* coef = ctx.workspace<A>(static_cast<size_t>(4 * c));
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  GradFinal<T><<<WarpBlocks(c), kThreads, 0, s>>>(
      part, in(1), in(2), in(3), in(5), in(6), c, k.parts, ctx.b("training"), ctx.f("eps"),
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()),
      coef);
  CheckLaunch(ctx);
  if (total == 0) return;
  const bool stage = !DenseIn(dxt, true);
  T* out = stage ? ctx.workspace<T>(static_cast<size_t>(total)) : dx;
  GradApplyRows<T><<<Blocks(total), kThreads, 0, s>>>(x, dy, coef, out, total, c);
  CheckLaunch(ctx);
  if (stage) Restage<T>(ctx, dxt, out, dx, false);
}

template <typename T>
void BatchNormGrad(dg::KernelContext& ctx) {
  using A = Acc<T>;
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  const T* x = static_cast<const T*>(xt.raw_data());
  const T* dy = static_cast<const T*>(ctx.input(4).raw_data());
  T* dx = static_cast<T*>(ctx.output(0).raw_data());
  if (StrictlyChannelsLast(xt)) {
    BatchNormGradRows<T>(ctx, xt, x, dy, dx);
    return;
  }
  // Row-major x: a channels-last dy (the trait lets it through) is made
  // row-major first.
  const dg::TensorRef dyt = ctx.input(4);
  if (!DenseIn(dyt, false))
    dy = Restage<T>(ctx, dyt, dy, ctx.workspace<T>(static_cast<size_t>(dyt.numel())), false);
  const ChannelCut k = CutFor<T>(ctx, v, {x, dy, dx});
  const unsigned blocks = static_cast<unsigned>(k.c * k.parts);
  double* part = ctx.workspace<double>(static_cast<size_t>(k.c * k.parts * kMomentFields));
  WithVec<T>(k, [&](auto vec) {
    PartialMoments<T, decltype(vec)::value, true><<<blocks, kThreads, 0, s>>>(x, dy, k, part);
  });
  CheckLaunch(ctx);
  A* coef = ctx.workspace<A>(static_cast<size_t>(4 * v.c));
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  GradFinal<T><<<WarpBlocks(v.c), kThreads, 0, s>>>(
      part, in(1), in(2), in(3), in(5), in(6), v.c, k.parts, ctx.b("training"), ctx.f("eps"),
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()),
      coef);
  CheckLaunch(ctx);
  if (k.units == 0) return;
  WithVec<T>(k, [&](auto vec) {
    GradApply<T, decltype(vec)::value><<<blocks, kThreads, 0, s>>>(x, dy, coef, dx, k);
  });
  CheckLaunch(ctx);
}
DG_KERNEL_EX("BatchNormGrad", "cuda", 0, DG_KERNEL_CHANNELS_LAST, BatchNormGrad, float, double,
             half, bf16);

// ------------------------------------------------------------ GroupNorm
// Per (sample, group) q, the contiguous run of cg * S values: statistics in
// double, y = (x - mean) * gamma[c] * rstd + beta[c]; the gradient as
// LayerNorm's per group, dgamma/dbeta summed per channel over (n, s).

template <typename T>
__device__ void RunMoments(const T* xp, int64_t len, double eps, double* buf, double* mean,
                           double* rstd) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += ToDouble(xp[i]);
  const double m = Sum(s, buf) / static_cast<double>(len);
  double q = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double d = ToDouble(xp[i]) - m;
    q += d * d;
  }
  *mean = m;
  *rstd = 1.0 / sqrt(Sum(q, buf) / static_cast<double>(len) + eps);
}

template <typename T>
__global__ void GroupNormKernel(const T* x, const T* gamma, const T* beta, T* y, NCS v,
                                int64_t groups, double eps) {
  __shared__ double buf[kThreads];
  const int64_t cg = v.c / groups, len = cg * v.s;
  for (int64_t q = blockIdx.x; q < v.n * groups; q += gridDim.x) {
    const T* xp = x + q * len;
    double mean, rstd;
    RunMoments(xp, len, eps, buf, &mean, &rstd);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const int64_t c = (q % groups) * cg + i / v.s;
      using A = Acc<T>;
      const A m = static_cast<A>(mean), a = static_cast<A>(ToDouble(gamma[c]) * rstd),
              b = Load(beta[c]);
      y[q * len + i] = Store<T>((Load(xp[i]) - m) * a + b);
    }
  }
}

template <typename T>
void GroupNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  const int64_t groups = ctx.i("groups");
  DG_CHECK(groups > 0 && v.c % groups == 0, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", v.c,
           " channels do not split into ", groups, " groups");
  if (xt.numel() == 0) return;
  GroupNormKernel<T><<<ChannelBlocks(v.n * groups), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(xt.raw_data()), static_cast<const T*>(ctx.input(1).raw_data()),
      static_cast<const T*>(ctx.input(2).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      v, groups, ctx.f("eps"));
  CheckLaunch(ctx);
}
DG_KERNEL("GroupNorm", "cuda", GroupNorm, float, double, half, bf16);

template <typename T>
__global__ void GroupNormDx(const T* x, const T* gamma, const T* dy, T* dx, double* stats, NCS v,
                            int64_t groups, double eps) {
  __shared__ double buf[kThreads];
  const int64_t cg = v.c / groups, len = cg * v.s;
  for (int64_t q = blockIdx.x; q < v.n * groups; q += gridDim.x) {
    const T* xp = x + q * len;
    const T* gp = dy + q * len;
    double mean, rstd;
    RunMoments(xp, len, eps, buf, &mean, &rstd);
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const T gm = gamma[(q % groups) * cg + i / v.s];
      const double g = ToDouble(gp[i]) * ToDouble(gm);
      a += g;
      b += g * (ToDouble(xp[i]) - mean) * rstd;
    }
    const double s1 = Sum(a, buf), s2 = Sum(b, buf);
    if (threadIdx.x == 0) {
      stats[2 * q] = mean;
      stats[2 * q + 1] = rstd;
    }
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    const A k1 = static_cast<A>(s1 / len), k2 = static_cast<A>(s2 / len);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const A gm = Load(gamma[(q % groups) * cg + i / v.s]);
      const A xhat = (Load(xp[i]) - m) * rs;
      dx[q * len + i] = Store<T>(rs * (Load(gp[i]) * gm - k1 - xhat * k2));
    }
  }
}

template <typename T>
__global__ void GroupNormParams(const T* x, const T* dy, const double* stats, NCS v,
                                int64_t groups, T* dgamma, T* dbeta) {
  const int64_t cg = v.c / groups;
  DGC_LOOP(c, v.c) {
    double g = 0, b = 0;
    for (int64_t n = 0; n < v.n; ++n) {
      const int64_t q = n * groups + c / cg;
      const double mean = stats[2 * q], rstd = stats[2 * q + 1];
      const T* xp = x + (n * v.c + c) * v.s;
      const T* gp = dy + (n * v.c + c) * v.s;
      for (int64_t i = 0; i < v.s; ++i) {
        const double d = ToDouble(gp[i]);
        g += d * (ToDouble(xp[i]) - mean) * rstd;
        b += d;
      }
    }
    dgamma[c] = FromDouble<T>(g);
    dbeta[c] = FromDouble<T>(b);
  }
}

template <typename T>
void GroupNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  const int64_t groups = ctx.i("groups");
  DG_CHECK(groups > 0 && v.c % groups == 0, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", v.c,
           " channels do not split into ", groups, " groups");
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  const T* x = static_cast<const T*>(xt.raw_data());
  const T* dy = static_cast<const T*>(ctx.input(2).raw_data());
  const int64_t q = v.n * groups;
  double* stats = ctx.workspace<double>(static_cast<size_t>(2 * (q > 0 ? q : 1)));
  if (xt.numel() > 0) {
    GroupNormDx<T><<<ChannelBlocks(q), kThreads, 0, s>>>(
        x, static_cast<const T*>(ctx.input(1).raw_data()), dy,
        static_cast<T*>(ctx.output(0).raw_data()), stats, v, groups, ctx.f("eps"));
    CheckLaunch(ctx);
  }
  GroupNormParams<T><<<Blocks(v.c), kThreads, 0, s>>>(
      x, dy, stats, v, groups, static_cast<T*>(ctx.output(1).raw_data()),
      static_cast<T*>(ctx.output(2).raw_data()));
  CheckLaunch(ctx);
}
DG_KERNEL("GroupNormGrad", "cuda", GroupNormGrad, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
