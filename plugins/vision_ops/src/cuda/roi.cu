// CUDA kernels of RoiAlign, RoiAlignGrad, RoiPool, RoiPoolGrad and
// RoiPoolGather (schemas in ../roi_ops.cc, CPU kernels in ../roi.cc).
//
// Validation without a stall: the rois are checked on the host by the same
// code as the CPU kernels (CheckRois in roi_ops.cc), so a bad batch index
// is the same clear error on both devices. Their copy to (pinned) host
// memory is queued on the stream *before* the kernel, and the host waits
// for that copy only, then checks while the kernel runs: the GPU does not
// idle between calls. The kernels are memory-safe on rois that fail the
// check (they skip them, writing zeros), and the call then raises.
//
// RoiAlign / RoiAlignGrad (modes avg and max): one thread block per (roi,
// block of channels). The block first builds the roi's sampling grid as two
// axis tables in shared memory (per bin row and sample row: the two source
// rows and their weights; the same per column), then each thread takes
// outputs (channel, bin), bins fastest, so the writes (and dy's reads) are
// coalesced and the bilinear taps of neighbouring threads are neighbouring
// cells. Coordinates, weights and sums follow the CPU's formulas operation
// by operation, rounded as the CPU rounds them (the fused multiply-adds
// of the coordinates are explicit on both devices; nothing else is
// contracted), in the CPU's order. A roi whose grid
// has more than kAxisCap samples on an axis computes its taps inline.
// Indices are 32-bit when the tensors allow it.
//
// The gradient kernels add into dx (zeroed on the stream first) with
// atomicAdd: the sums are exact up to the order of floating-point
// additions, which may vary from run to run in the last bits.
//
// RoiAlign's mode "max" (ONNX) mirrors the CPU's MaxTerm (roi.cc): each
// bilinear sample offers its four weighted corner terms (all 0 * x[0]
// outside the map), the sample's largest term (the first on ties) competes
// with the other samples' in order; the bin takes that term, and the
// gradient goes to its cell with its weight.
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "../roi.h"
#include "cuda_common.cuh"

namespace vision {

namespace cuda {
namespace {

// The sizes of one call, passed to the kernels by value.
struct Dims {
  int64_t n, c, h, w, k, oh, ow;
  __host__ __device__ int64_t outputs() const { return k * c * oh * ow; }
};

// ------------------------------------------------ rois to the host, async

// A pinned host buffer and an event of one device, reused across calls
// (a pool, so concurrent calls from several threads each get their own).
struct HostSlot {
  int device = 0;
  cudaEvent_t copied = nullptr;
  void* buffer = nullptr;
  size_t capacity = 0;
};

std::mutex g_slot_mutex;
std::vector<HostSlot*> g_free_slots;  // never freed: reused for the process

// The rois of one call on the host: Start queues their copy on the stream
// (before the kernel), Wait blocks until that copy (only) has landed.
class HostRois {
 public:
  ~HostRois() {
    if (!slot_) return;
    // An error between Start and Wait: let the copy land before another
    // call reuses the buffer.
    if (pending_) cudaEventSynchronize(slot_->copied);
    std::lock_guard<std::mutex> lock(g_slot_mutex);
    g_free_slots.push_back(slot_);
  }

  void Start(const void* device_rois, size_t bytes, cudaStream_t stream) {
    int device = 0;
    Check(cudaGetDevice(&device), "reading the current device");
    {
      std::lock_guard<std::mutex> lock(g_slot_mutex);
      for (size_t i = 0; i < g_free_slots.size(); ++i) {
        if (g_free_slots[i]->device == device) {
          slot_ = g_free_slots[i];
          g_free_slots.erase(g_free_slots.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    if (!slot_) {
      auto* s = new HostSlot;
      s->device = device;
      const cudaError_t e = cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming);
      if (e != cudaSuccess) delete s;
      Check(e, "creating the rois' copy event");
      slot_ = s;
    }
    if (slot_->capacity < bytes) {
      if (slot_->buffer) Check(cudaFreeHost(slot_->buffer), "freeing pinned memory");
      slot_->buffer = nullptr;
      slot_->capacity = 0;
      Check(cudaHostAlloc(&slot_->buffer, bytes, cudaHostAllocPortable),
            "allocating pinned memory for the rois");
      slot_->capacity = bytes;
    }
    Check(cudaMemcpyAsync(slot_->buffer, device_rois, bytes, cudaMemcpyDeviceToHost, stream),
          "copying rois to the host");
    Check(cudaEventRecord(slot_->copied, stream), "recording the rois' copy");
    pending_ = true;
  }

  template <typename T>
  const T* Wait() {
    Check(cudaEventSynchronize(slot_->copied), "waiting for the rois");
    pending_ = false;
    return static_cast<const T*>(slot_->buffer);
  }

 private:
  HostSlot* slot_ = nullptr;
  bool pending_ = false;
};

void Zero(const dg::KernelContext& ctx, int32_t output) {
  const dg::TensorRef t = ctx.output(output);
  if (t.numel() == 0) return;
  Check(cudaMemsetAsync(t.raw_data(), 0, t.numel() * dg::DTypeSize(t.dtype()),
                        Stream(ctx)),
        "zeroing the gradient");
}

// The frame of every RoI kernel: queues the rois' copy to the host, zeroes
// dx for a gradient (`zero_dx`), runs launch(dims, attrs, stream) when
// there are outputs, checks the launch, then checks the rois on the host
// (the error a bad roi raises on the CPU).
template <typename T, typename Launch>
void RunRoiOp(dg::KernelContext& ctx, bool align, bool zero_dx, Launch launch) {
  const dg::TensorRef x = ctx.input(0), rois = ctx.input(1);
  const RoiAttrs a = ReadRoiAttrs(ctx, align);
  const cudaStream_t stream = Stream(ctx);
  const Dims d{x.dim(0), x.dim(1), x.dim(2), x.dim(3), rois.dim(0), a.oh, a.ow};
  HostRois host;
  if (d.k > 0) host.Start(rois.raw_data(), static_cast<size_t>(5 * d.k) * sizeof(T), stream);
  if (zero_dx) Zero(ctx, 0);
  if (d.outputs() > 0) {
    launch(d, a, stream);
    Check(cudaGetLastError(), ctx.op_name());
  }
  if (d.k > 0) CheckRois<T>(host.Wait<T>(), d.k, d.n, a, align);
}

// A roi the kernels may read: batch index an integer in [0, n), finite
// coordinates (CheckRois' first two rules; it raises for the others).
template <typename T>
__device__ inline bool RoiReadable(const T* roi, int64_t n) {
  const double b = static_cast<double>(roi[0]);
  if (!(isfinite(b) && b == floor(b) && b >= 0 && b < static_cast<double>(n))) return false;
  for (int j = 1; j < 5; ++j) {
    if (!isfinite(static_cast<double>(roi[j]))) return false;
  }
  return true;
}

// Output index -> (roi, channel, bin row, bin column).
struct Pos {
  int64_t k, c, i, j;
};

__device__ inline Pos Unravel(int64_t idx, const Dims& d) {
  Pos p;
  p.j = idx % d.ow;
  p.i = (idx / d.ow) % d.oh;
  p.c = (idx / (d.ow * d.oh)) % d.c;
  p.k = idx / (d.ow * d.oh * d.c);
  return p;
}

// ---------------------------------------------------------------- RoiAlign

enum Pass : int { kAvg = 0, kMax = 1, kAvgGrad = 2, kMaxGrad = 3 };

// Samples per axis table kept in shared memory; a roi needing more on an
// axis computes that axis' taps inline.
constexpr int kAxisCap = 256;
constexpr int kRoiThreads = 256;
// Outputs a block aims at (channels per block follow from the bin count).
constexpr int64_t kOutputsPerBlock = 4096;

// The grid of one roi (the CPU's BuildAlignTable): corner, bin size,
// samples per bin and axis, weight scale; ok = false for a roi the kernel
// skips (not readable, or a sample count far past CheckRois' limit).
template <typename T>
struct Geom {
  T x0, y0, bw, bh, inv;
  int64_t gh, gw;
  bool ok;
};

template <typename T>
__device__ Geom<T> GeomOf(const T* roi, const Dims& d, T scale, int64_t sampling,
                          bool aligned, bool max_mode) {
  Geom<T> g;
  const T off = aligned ? T(0.5) : T(0);
  g.x0 = Fma(roi[1], scale, -off);
  g.y0 = Fma(roi[2], scale, -off);
  T rw = Sub(Fma(roi[3], scale, -off), g.x0);
  T rh = Sub(Fma(roi[4], scale, -off), g.y0);
  if (!aligned) rw = StdMax(rw, T(1)), rh = StdMax(rh, T(1));
  g.bw = Div(rw, T(d.ow));
  g.bh = Div(rh, T(d.oh));
  g.gh = GridSize(static_cast<double>(rh), d.oh, sampling);
  g.gw = GridSize(static_cast<double>(rw), d.ow, sampling);
  const int64_t per_bin = g.gh * g.gw;  // each at most 1e9: no overflow
  g.inv = max_mode ? T(1) : Div(T(1), T(per_bin > 1 ? per_bin : 1));
  // CheckRois (double sizes) bounds the samples; this float-size bound,
  // four times looser, only keeps a rejected roi from running for hours.
  g.ok = RoiReadable(roi, d.n) &&
         static_cast<double>(g.gh) * static_cast<double>(g.gw) *
                 static_cast<double>(d.oh * d.ow) <=
             4.0 * static_cast<double>(kMaxSamplesPerRoi);
  return g;
}

// One sample row (or column) of a bin: the two source rows' offsets lo, hi
// (row * stride) and weights; lo < 0 when the sample lies outside the map
// (the CPU's Bilinear then gives four zero weights at offset 0).
template <typename T, typename I>
struct Axis {
  I lo, hi;
  T wlo, whi;
};

// Sample s of bin i along an axis of `len` cells: the CPU's coordinate
// fma(i, bin, start) + (s + 0.5) * bin / g and Bilinear's border rule.
template <typename T, typename I>
__device__ inline Axis<T, I> AxisOf(T start, T bin, int64_t g, int64_t i, int64_t s,
                                    int64_t len, I stride) {
  Axis<T, I> a;
  T p = Add(Fma(T(i), bin, start), Div(Mul(Add(T(s), T(0.5)), bin), T(g)));
  if (!(p >= T(-1) && p <= T(len))) {
    a.lo = a.hi = I(-1);
    a.wlo = a.whi = T(0);
    return a;
  }
  p = StdMax(p, T(0));
  int64_t lo = static_cast<int64_t>(p), hi = lo + 1;
  if (lo >= len - 1) {
    lo = hi = len - 1;
    p = T(lo);
  }
  const T l = Sub(p, T(lo));
  a.lo = static_cast<I>(lo) * stride;
  a.hi = static_cast<I>(hi) * stride;
  a.wlo = Sub(T(1), l);
  a.whi = l;
  return a;
}

// The four taps of the sample (ay, ax): offsets and weights (scaled by
// inv) as the CPU's Bilinear orders them; all zero outside the map.
template <typename T, typename I>
__device__ inline void Taps(const Axis<T, I>& ay, const Axis<T, I>& ax, T inv, I at[4],
                            T wt[4]) {
  if (ay.lo < 0 || ax.lo < 0) {
    for (int q = 0; q < 4; ++q) at[q] = 0, wt[q] = T(0);
    return;
  }
  at[0] = ay.lo + ax.lo;
  at[1] = ay.lo + ax.hi;
  at[2] = ay.hi + ax.lo;
  at[3] = ay.hi + ax.hi;
  wt[0] = Mul(Mul(ay.wlo, ax.wlo), inv);
  wt[1] = Mul(Mul(ay.wlo, ax.whi), inv);
  wt[2] = Mul(Mul(ay.whi, ax.wlo), inv);
  wt[3] = Mul(Mul(ay.whi, ax.whi), inv);
}

// The four passes over (roi, channel block) work items: kAvg / kMax write
// y = out [K, C, oh, ow] from x; kAvgGrad / kMaxGrad add dy's terms into
// dx = out [N, C, H, W] (kMaxGrad reads x to select the term).
template <typename T, typename I, int kPass>
__global__ void __launch_bounds__(kRoiThreads)
RoiAlignBlockKernel(Dims d, int64_t splits, int64_t per, const T* x, const T* rois,
                    const T* dy, T scale, int64_t sampling, bool aligned, T* out) {
  constexpr bool kMaxMode = kPass == kMax || kPass == kMaxGrad;
  constexpr bool kGrad = kPass == kAvgGrad || kPass == kMaxGrad;
  __shared__ Axis<T, I> ys[kAxisCap], xs[kAxisCap];
  const int64_t k = blockIdx.x / splits, part = blockIdx.x % splits;
  const int64_t c0 = part * per;
  const int64_t c1 = c0 + per < d.c ? c0 + per : d.c;
  if (c0 >= c1) return;
  const T* roi = rois + 5 * k;
  const Geom<T> g = GeomOf(roi, d, scale, sampling, aligned, kMaxMode);
  const I ow = static_cast<I>(d.ow), bins = static_cast<I>(d.oh * d.ow);
  const I count = static_cast<I>((c1 - c0) * d.oh * d.ow);
  const int t = threadIdx.x;
  if (!g.ok) {  // skipped; the host check raises for it
    if (!kGrad) {
      for (I e = t; e < count; e += kRoiThreads) {
        out[(static_cast<I>(k * d.c + c0)) * bins + e] = T(0);
      }
    }
    return;
  }
  const bool table = d.oh * g.gh <= kAxisCap && d.ow * g.gw <= kAxisCap;
  if (table) {
    for (int64_t s = t; s < d.oh * g.gh; s += kRoiThreads) {
      ys[s] = AxisOf<T, I>(g.y0, g.bh, g.gh, s / g.gh, s % g.gh, d.h, static_cast<I>(d.w));
    }
    for (int64_t s = t; s < d.ow * g.gw; s += kRoiThreads) {
      xs[s] = AxisOf<T, I>(g.x0, g.bw, g.gw, s / g.gw, s % g.gw, d.w, I(1));
    }
  }
  __syncthreads();
  const I gh = static_cast<I>(g.gh), gw = static_cast<I>(g.gw);
  const I plane_size = static_cast<I>(d.h * d.w);
  const I batch = static_cast<I>(roi[0]);
  for (I e = t; e < count; e += kRoiThreads) {
    const I cc = e / bins, bin = e - cc * bins;
    const I i = bin / ow, j = bin - i * ow;
    const I c = static_cast<I>(c0) + cc;
    const I plane = (batch * static_cast<I>(d.c) + c) * plane_size;
    const I o = (static_cast<I>(k) * static_cast<I>(d.c) + c) * bins + bin;
    const T* xp = x + plane;
    T sum = T(0);                   // kAvg
    I best_at = -1;                 // kMax, kMaxGrad
    T best_w = T(0), best_v = T(0);
    const T grad = kPass == kAvgGrad ? dy[o] : T(0);
    for (I iy = 0; iy < gh; ++iy) {
      const Axis<T, I> ay =
          table ? ys[i * gh + iy]
                : AxisOf<T, I>(g.y0, g.bh, g.gh, i, iy, d.h, static_cast<I>(d.w));
      for (I ix = 0; ix < gw; ++ix) {
        const Axis<T, I> ax =
            table ? xs[j * gw + ix] : AxisOf<T, I>(g.x0, g.bw, g.gw, j, ix, d.w, I(1));
        I at[4];
        T wt[4];
        Taps(ay, ax, g.inv, at, wt);
        if (kPass == kAvg) {
          sum = Add(sum, Add(Add(Add(Mul(wt[0], xp[at[0]]), Mul(wt[1], xp[at[1]])),
                                 Mul(wt[2], xp[at[2]])),
                             Mul(wt[3], xp[at[3]])));
        } else if (kPass == kAvgGrad) {
          for (int q = 0; q < 4; ++q) {
            const T term = Mul(grad, wt[q]);
            // dx starts at +0 and never holds -0, so adding a zero term
            // changes nothing (a NaN one is still added, as on the CPU).
            if (term != T(0)) atomicAdd(out + plane + at[q], term);
          }
        } else {
          // The sample's largest term (the first on ties), then across
          // samples; no array indexed at run time (registers only).
          I v_at = at[0];
          T v_w = wt[0], v = Mul(wt[0], xp[at[0]]);
#pragma unroll
          for (int r = 1; r < 4; ++r) {
            const T term = Mul(wt[r], xp[at[r]]);
            if (term > v) v = term, v_at = at[r], v_w = wt[r];
          }
          if (best_at < 0 || v > best_v) best_at = v_at, best_w = v_w, best_v = v;
        }
      }
    }
    if (kPass == kAvg) out[o] = sum;
    if (kPass == kMax) out[o] = best_at < 0 ? T(0) : Mul(best_w, xp[best_at]);
    if (kPass == kMaxGrad && best_at >= 0) atomicAdd(out + plane + best_at, Mul(dy[o], best_w));
  }
}

// Channels per block and blocks per roi for `d`.
void Split(const Dims& d, int64_t* per, int64_t* splits) {
  const int64_t bins = d.oh * d.ow;
  int64_t p = kOutputsPerBlock / bins;
  p = p < 1 ? 1 : (p > d.c ? d.c : p);
  *splits = (d.c + p - 1) / p;
  *per = (d.c + *splits - 1) / *splits;
}

template <typename T, int kPass>
void LaunchAlign(dg::KernelContext& ctx, const Dims& d, const RoiAttrs& a, cudaStream_t stream,
                 T* out) {
  int64_t per = 1, splits = 1;
  Split(d, &per, &splits);
  const int64_t blocks = d.k * splits;
  DG_CHECK(blocks <= INT_MAX, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", d.k, " rois x ",
           splits, " channel blocks are more thread blocks than a launch takes");
  const T* x = ctx.input(0).data<const T>();
  const T* rois = ctx.input(1).data<const T>();
  const T* dy = kPass >= kAvgGrad ? ctx.input(2).data<const T>() : nullptr;
  const int64_t x_size = ctx.input(0).numel();
  const int64_t y_size = d.outputs();
  const T scale = static_cast<T>(a.scale);
  if (x_size < INT_MAX && y_size < INT_MAX) {
    RoiAlignBlockKernel<T, int32_t, kPass><<<static_cast<unsigned>(blocks), kRoiThreads, 0,
                                             stream>>>(d, splits, per, x, rois, dy, scale,
                                                       a.sampling, a.aligned, out);
  } else {
    RoiAlignBlockKernel<T, int64_t, kPass><<<static_cast<unsigned>(blocks), kRoiThreads, 0,
                                             stream>>>(d, splits, per, x, rois, dy, scale,
                                                       a.sampling, a.aligned, out);
  }
}

template <typename T>
void RoiAlignCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, true, false, [&](const Dims& d, const RoiAttrs& a, cudaStream_t stream) {
    T* y = ctx.output(0).data<T>();
    if (a.max_mode) {
      LaunchAlign<T, kMax>(ctx, d, a, stream, y);
    } else {
      LaunchAlign<T, kAvg>(ctx, d, a, stream, y);
    }
  });
}

template <typename T>
void RoiAlignGradCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, true, true, [&](const Dims& d, const RoiAttrs& a, cudaStream_t stream) {
    T* dx = ctx.output(0).data<T>();
    if (a.max_mode) {  // x selects the term each bin took
      LaunchAlign<T, kMaxGrad>(ctx, d, a, stream, dx);
    } else {
      LaunchAlign<T, kAvgGrad>(ctx, d, a, stream, dx);
    }
  });
}

// ----------------------------------------------------------------- RoiPool

// Offset of the plane (batch of roi, channel p.c) in x.
template <typename T>
__device__ inline int64_t PlaneOf(const T* roi, const Pos& p, const Dims& d) {
  return (static_cast<int64_t>(roi[0]) * d.c + p.c) * d.h * d.w;
}

// [start, end) of bin i of `bins` over a roi from cell `origin` spanning
// `size` cells, clipped to [0, len] (NaN gives 0).
__device__ inline void BinCells(int64_t i, int64_t bins, double origin,
                                double size, int64_t len, int64_t* start,
                                int64_t* end) {
  const double bin = size / static_cast<double>(bins);
  double lo = floor(static_cast<double>(i) * bin) + origin;
  double hi = ceil(static_cast<double>(i + 1) * bin) + origin;
  const double top = static_cast<double>(len);
  lo = lo > 0 ? (lo < top ? lo : top) : 0.0;
  hi = hi > 0 ? (hi < top ? hi : top) : 0.0;
  *start = static_cast<int64_t>(lo);
  *end = static_cast<int64_t>(hi);
}

// In-plane index of the maximum of bin p (first in row-major order, NaN
// winning), or -1 for an empty bin; torchvision's quantisation.
template <typename T>
__device__ int64_t ArgMax(const T* plane, const T* roi, const Pos& p,
                          const Dims& d, double scale) {
  const double x1 = round(roi[1] * scale), y1 = round(roi[2] * scale);
  const double x2 = round(roi[3] * scale), y2 = round(roi[4] * scale);
  const double rw = fmax(x2 - x1 + 1.0, 1.0), rh = fmax(y2 - y1 + 1.0, 1.0);
  int64_t h0, h1, w0, w1;
  BinCells(p.i, d.oh, y1, rh, d.h, &h0, &h1);
  BinCells(p.j, d.ow, x1, rw, d.w, &w0, &w1);
  int64_t best = -1;
  T best_v = T(0);
  for (int64_t r = h0; r < h1; ++r) {
    for (int64_t c = w0; c < w1; ++c) {
      const T v = plane[r * d.w + c];
      if (best < 0 || v > best_v || (isnan(v) && !isnan(best_v))) {
        best = r * d.w + c;
        best_v = v;
      }
    }
  }
  return best;
}

// y[k, c, i, j] = values at the argmax of x in bin (i, j), 0 when empty.
template <typename T>
__global__ void GatherKernel(Dims d, const T* x, const T* rois,
                             const T* values, double scale, T* y) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    if (!RoiReadable(roi, d.n)) {  // skipped; the host check raises for it
      y[idx] = T(0);
      continue;
    }
    const int64_t base = PlaneOf(roi, p, d);
    const int64_t at = ArgMax(x + base, roi, p, d, scale);
    y[idx] = at < 0 ? T(0) : values[base + at];
  }
}

template <typename T>
__global__ void ScatterKernel(Dims d, const T* x, const T* rois, const T* dy,
                              double scale, T* dx) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    if (!RoiReadable(roi, d.n)) continue;  // the host check raises for it
    const int64_t base = PlaneOf(roi, p, d);
    const int64_t at = ArgMax(x + base, roi, p, d, scale);
    if (at >= 0) atomicAdd(dx + base + at, dy[idx]);
  }
}

// RoiPool (values = input 0) and RoiPoolGather (values = input 2).
template <typename T>
void GatherCuda(dg::KernelContext& ctx, int32_t values_input) {
  RunRoiOp<T>(ctx, false, false, [&](const Dims& d, const RoiAttrs& a,
                                     cudaStream_t stream) {
    const unsigned blocks = Blocks(d.outputs());
    GatherKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
        ctx.input(values_input).data<const T>(), a.scale,
        ctx.output(0).data<T>());
  });
}

template <typename T>
void RoiPoolCuda(dg::KernelContext& ctx) {
  GatherCuda<T>(ctx, 0);
}

template <typename T>
void RoiPoolGatherCuda(dg::KernelContext& ctx) {
  GatherCuda<T>(ctx, 2);
}

template <typename T>
void RoiPoolGradCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, false, true, [&](const Dims& d, const RoiAttrs& a,
                                    cudaStream_t stream) {
    const unsigned blocks = Blocks(d.outputs());
    ScatterKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
        ctx.input(2).data<const T>(), a.scale, ctx.output(0).data<T>());
  });
}

}  // namespace

DG_KERNEL("RoiAlign", "cuda", RoiAlignCuda, float, double);
DG_KERNEL("RoiAlignGrad", "cuda", RoiAlignGradCuda, float, double);
DG_KERNEL("RoiPool", "cuda", RoiPoolCuda, float, double);
DG_KERNEL("RoiPoolGrad", "cuda", RoiPoolGradCuda, float, double);
DG_KERNEL("RoiPoolGather", "cuda", RoiPoolGatherCuda, float, double);

}  // namespace cuda
}  // namespace vision
