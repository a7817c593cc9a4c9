// CUDA kernels of DeformConv2d and DeformConv2dGrad (schemas, shape rules
// and the definition in ../deform_conv.cc). Per image: a deformable im2col
// (one thread per column element), a shared-memory tiled GEMM per channel
// group (this plugin links no cuBLAS), and for the backward pass a bilinear
// scatter with atomics (dx) and one thread per (offset group, tap, position)
// for the offset and mask gradients. The shape rule has validated every
// shape before these run.
#include <cstdint>
#include <vector>

#include "cuda_common.cuh"

namespace vision {
namespace cuda {
namespace {

// The geometry, by value into every kernel.
struct Dims {
  int64_t c, h, w;            // input channels and image size
  int64_t o, kh, kw, taps;    // filter
  int64_t ho, wo, positions;  // output
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups, offset_groups, per_offset_group;
};

Dims ReadDims(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), off = ctx.input(2);
  const std::vector<int64_t> s = ctx.ints("strides"), p = ctx.ints("pads"),
                             d = ctx.ints("dilations");
  Dims g;
  g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.o = w.dim(0), g.kh = w.dim(2), g.kw = w.dim(3), g.taps = g.kh * g.kw;
  g.ho = off.dim(2), g.wo = off.dim(3), g.positions = g.ho * g.wo;
  g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1], g.dh = d[0], g.dw = d[1];
  g.groups = ctx.i("groups");
  g.offset_groups = ctx.i("offset_groups");
  g.per_offset_group = g.c / g.offset_groups;
  return g;
}

// Visits the in-image neighbours of the sampling point (y, x) as
// fn(pixel index, bilinear weight, d weight / dy, d weight / dx); a point
// outside (-1, H) x (-1, W), or NaN, has none.
template <typename T, typename F>
__device__ void ForNeighbours(T y, T x, int64_t h, int64_t w, F fn) {
  if (!(y > T(-1) && y < T(h) && x > T(-1) && x < T(w))) return;
  const T fy = floor(y), fx = floor(x);
  const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  const T ly = y - fy, lx = x - fx;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int64_t yy = y0 + (t >> 1), xx = x0 + (t & 1);
    if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
    const T wy = (t >> 1) ? ly : T(1) - ly, wx = (t & 1) ? lx : T(1) - lx;
    const T sy = (t >> 1) ? T(1) : T(-1), sx = (t & 1) ? T(1) : T(-1);
    fn(yy * w + xx, wy * wx, sy * wx, wy * sx);
  }
}

// The sampling point and modulation of tap k, offset-group row
// `row` = og * taps + k, at output position pos, for one image.
template <typename T>
__device__ T SamplePoint(const Dims& g, const T* offset, const T* mask,
                         int64_t row, int64_t k, int64_t pos, T* y, T* x) {
  const int64_t i = pos / g.wo, j = pos % g.wo;
  *y = static_cast<T>(i * g.sh - g.ph + (k / g.kw) * g.dh) +
       offset[2 * row * g.positions + pos];
  *x = static_cast<T>(j * g.sw - g.pw + (k % g.kw) * g.dw) +
       offset[(2 * row + 1) * g.positions + pos];
  return mask ? mask[row * g.positions + pos] : T(1);
}

// The channel, sampling point and modulation of column element
// e = (c * taps + k) * P + pos.
template <typename T>
__device__ T ColumnSample(const Dims& g, int64_t e, const T* offset,
                          const T* mask, int64_t* ch, T* y, T* x) {
  const int64_t pos = e % g.positions, k = (e / g.positions) % g.taps;
  *ch = e / (g.positions * g.taps);
  const int64_t row = (*ch / g.per_offset_group) * g.taps + k;
  return SamplePoint(g, offset, mask, row, k, pos, y, x);
}

// col[(c * taps + k) * P + pos] = m * bilinear(x[c]); one thread per element.
template <typename T>
__global__ void Im2ColKernel(Dims g, const T* x, const T* offset,
                             const T* mask, T* col) {
  VISION_CUDA_LOOP(e, g.c * g.taps * g.positions) {
    int64_t ch;
    T y, xs;
    const T m = ColumnSample(g, e, offset, mask, &ch, &y, &xs);
    const T* plane = x + ch * g.h * g.w;
    T v = T(0);
    ForNeighbours(y, xs, g.h, g.w,
                  [&](int64_t at, T wt, T, T) { v += wt * plane[at]; });
    col[e] = m * v;
  }
}

// dx[c] += scatter of m * dcol; several taps may hit one pixel: atomics.
template <typename T>
__global__ void Col2ImKernel(Dims g, const T* offset, const T* mask,
                             const T* dcol, T* dx) {
  VISION_CUDA_LOOP(e, g.c * g.taps * g.positions) {
    int64_t ch;
    T y, xs;
    const T v = ColumnSample(g, e, offset, mask, &ch, &y, &xs) * dcol[e];
    T* plane = dx + ch * g.h * g.w;
    ForNeighbours(y, xs, g.h, g.w, [&](int64_t at, T wt, T, T) {
      atomicAdd(plane + at, v * wt);
    });
  }
}

// Offset and mask gradients; one thread per (offset group, tap, position),
// summing over the group's channels.
template <typename T>
__global__ void CoordGradKernel(Dims g, const T* x, const T* offset,
                                const T* mask, const T* dcol, T* doffset,
                                T* dmask) {
  VISION_CUDA_LOOP(e, g.offset_groups * g.taps * g.positions) {
    const int64_t pos = e % g.positions, row = e / g.positions;
    const int64_t k = row % g.taps, og = row / g.taps;
    T y, xs;
    const T m = SamplePoint(g, offset, mask, row, k, pos, &y, &xs);
    T gy = T(0), gx = T(0), gm = T(0);
    for (int64_t ch = og * g.per_offset_group;
         ch < (og + 1) * g.per_offset_group; ++ch) {
      const T* plane = x + ch * g.h * g.w;
      const T d = dcol[(ch * g.taps + k) * g.positions + pos];
      ForNeighbours(y, xs, g.h, g.w, [&](int64_t at, T wt, T wy, T wx) {
        gy += d * wy * plane[at];
        gx += d * wx * plane[at];
        gm += d * wt * plane[at];
      });
    }
    if (doffset) {
      doffset[2 * row * g.positions + pos] = m * gy;
      doffset[(2 * row + 1) * g.positions + pos] = m * gx;
    }
    if (dmask) dmask[e] = gm;
  }
}

template <typename T>
__global__ void AddBiasKernel(int64_t channels, int64_t positions,
                              const T* bias, T* y) {
  VISION_CUDA_LOOP(e, channels * positions) { y[e] += bias[e / positions]; }
}

constexpr int kTile = 16;

// C[M, N] = (accumulate ? C : 0) + op(A) op(B), row-major; op(A) = A [M, K]
// or (TA) A^T of A stored [K, M]; op(B) = B [K, N] or (TB) B^T of B stored
// [N, K]. One 16 x 16 output tile per block, K walked in shared-memory tiles.
template <typename T, bool TA, bool TB>
__global__ void GemmKernel(int64_t m, int64_t n, int64_t k, const T* a,
                           const T* b, bool accumulate, T* c) {
  __shared__ T as[kTile][kTile + 1];
  __shared__ T bs[kTile][kTile + 1];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  T sum = T(0);
  for (int64_t t0 = 0; t0 < k; t0 += kTile) {
    const int64_t ka = t0 + tx, kb = t0 + ty;
    as[ty][tx] = (row < m && ka < k) ? (TA ? a[ka * m + row] : a[row * k + ka])
                                     : T(0);
    bs[ty][tx] = (kb < k && col < n) ? (TB ? b[col * k + kb] : b[kb * n + col])
                                     : T(0);
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTile; ++t) sum += as[ty][t] * bs[t][tx];
    __syncthreads();
  }
  if (row < m && col < n) {
    c[row * n + col] = accumulate ? c[row * n + col] + sum : sum;
  }
}

template <typename T, bool TA, bool TB>
void Gemm(cudaStream_t stream, int64_t m, int64_t n, int64_t k, const T* a,
          const T* b, bool accumulate, T* c) {
  if (m == 0 || n == 0) return;
  const int64_t gy = (m + kTile - 1) / kTile, gx = (n + kTile - 1) / kTile;
  DG_CHECK(gy <= 65535 && gx <= 0x7fffffff, DG_INVALID_ARGUMENT,
           "matrix of ", m, " x ", n, " is too large for the CUDA GEMM");
  GemmKernel<T, TA, TB><<<dim3(static_cast<unsigned>(gx),
                               static_cast<unsigned>(gy)),
                          dim3(kTile, kTile), 0, stream>>>(m, n, k, a, b,
                                                           accumulate, c);
}

void CheckLaunch(const char* what) { Check(cudaGetLastError(), what); }

// Per-image views of the inputs.
template <typename T>
struct Image {
  const T *x, *offset, *mask;
};

template <typename T>
Image<T> ImageAt(const Dims& g, const T* x, const T* offset, const T* mask,
                 int64_t n) {
  const int64_t rows = g.offset_groups * g.taps;
  return {x + n * g.c * g.h * g.w, offset + n * 2 * rows * g.positions,
          mask ? mask + n * rows * g.positions : nullptr};
}

template <typename T>
void Im2Col(cudaStream_t s, const Dims& g, const Image<T>& im, T* col) {
  Im2ColKernel<T><<<Blocks(g.c * g.taps * g.positions), kThreads, 0, s>>>(
      g, im.x, im.offset, im.mask, col);
  CheckLaunch("DeformConv2d im2col");
}

template <typename T>
void DeformConv2dCuda(dg::KernelContext& ctx) {
  const Dims g = ReadDims(ctx);
  const int64_t batch = ctx.input(0).dim(0);
  const T* x = ctx.input(0).data<const T>();
  const T* w = ctx.input(1).data<const T>();
  const T* offset = ctx.input(2).data<const T>();
  const T* mask = ctx.num_inputs() > 3 ? ctx.input(3).data<const T>() : nullptr;
  const T* bias = ctx.num_inputs() > 4 ? ctx.input(4).data<const T>() : nullptr;
  T* y = ctx.output(0).data<T>();
  if (ctx.output(0).numel() == 0) return;
  const cudaStream_t s = Stream(ctx);
  const int64_t og = g.o / g.groups, kg = g.c / g.groups * g.taps;
  const int64_t p = g.positions;
  T* col = ctx.workspace<T>(static_cast<size_t>(g.c * g.taps * p));
  for (int64_t n = 0; n < batch; ++n) {
    Im2Col(s, g, ImageAt(g, x, offset, mask, n), col);
    T* yn = y + n * g.o * p;
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      Gemm<T, false, false>(s, og, p, kg, w + gr * og * kg, col + gr * kg * p,
                            false, yn + gr * og * p);
    }
    if (bias) {
      AddBiasKernel<T><<<Blocks(g.o * p), kThreads, 0, s>>>(g.o, p, bias, yn);
    }
    CheckLaunch("DeformConv2d GEMM");
  }
}

template <typename T>
T* ZeroedOutput(const dg::KernelContext& ctx, int i, bool wanted,
                cudaStream_t s) {
  if (!wanted) return nullptr;
  T* p = ctx.output(i).data<T>();
  const int64_t count = ctx.output(i).numel();
  if (count > 0) {
    Check(cudaMemsetAsync(p, 0, count * sizeof(T), s),
          "DeformConv2dGrad: zeroing an output");
  }
  return p;
}

template <typename T>
void DeformConv2dGradCuda(dg::KernelContext& ctx) {
  const Dims g = ReadDims(ctx);
  const int64_t batch = ctx.input(0).dim(0);
  const bool has_mask = ctx.num_inputs() > 4;
  const std::vector<int64_t> want = ctx.ints("grads");
  const T* x = ctx.input(0).data<const T>();
  const T* w = ctx.input(1).data<const T>();
  const T* offset = ctx.input(2).data<const T>();
  const T* dy = ctx.input(3).data<const T>();
  const T* mask = has_mask ? ctx.input(4).data<const T>() : nullptr;
  const cudaStream_t s = Stream(ctx);
  T* dx = ZeroedOutput<T>(ctx, 0, want[0] != 0, s);
  T* dw = ZeroedOutput<T>(ctx, 1, want[1] != 0, s);
  T* doffset = want[2] ? ctx.output(2).data<T>() : nullptr;
  T* dmask = want[3] && has_mask ? ctx.output(3).data<T>() : nullptr;
  const int64_t og = g.o / g.groups, kg = g.c / g.groups * g.taps;
  const int64_t p = g.positions, rows = g.offset_groups * g.taps;
  if (batch == 0) return;
  T* col = ctx.workspace<T>(static_cast<size_t>(g.c * g.taps * p));
  for (int64_t n = 0; n < batch; ++n) {
    const Image<T> im = ImageAt(g, x, offset, mask, n);
    const T* dyn = dy + n * g.o * p;
    if (dw) {
      Im2Col(s, g, im, col);
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        Gemm<T, false, true>(s, og, kg, p, dyn + gr * og * p,
                             col + gr * kg * p, true, dw + gr * og * kg);
      }
    }
    if (!dx && !doffset && !dmask) continue;
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      Gemm<T, true, false>(s, kg, p, og, w + gr * og * kg, dyn + gr * og * p,
                           false, col + gr * kg * p);
    }
    if (dx) {
      Col2ImKernel<T><<<Blocks(g.c * g.taps * p), kThreads, 0, s>>>(
          g, im.offset, im.mask, col, dx + n * g.c * g.h * g.w);
    }
    if (doffset || dmask) {
      CoordGradKernel<T><<<Blocks(rows * p), kThreads, 0, s>>>(
          g, im.x, im.offset, im.mask, col,
          doffset ? doffset + n * 2 * rows * p : nullptr,
          dmask ? dmask + n * rows * p : nullptr);
    }
    CheckLaunch("DeformConv2dGrad");
  }
}

}  // namespace

DG_KERNEL("DeformConv2d", "cuda", DeformConv2dCuda, float, double);
DG_KERNEL("DeformConv2dGrad", "cuda", DeformConv2dGradCuda, float, double);

}  // namespace cuda
}  // namespace vision
