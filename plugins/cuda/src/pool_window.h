// The max-pool window walk of the cuda plugin's MaxPool2d kernels (pool.cu),
// plain C++ so that host-side tests compile it without nvcc
// (plugins/cuda/tests/test_cuda_pool_window.py). One walk serves every
// layout: the caller gives the strides of x's rows and columns (NCHW: w and
// 1; channels-last: the tensor's own strides of axes 2 and 3) and a pointer
// to the window's plane (NCHW: the (n, c) plane; channels-last: element
// (n, c, 0, 0)).
//
// cpu_eigen's rules (pool.cc; PyTorch's): cells in the padding never win;
// a NaN wins over every number (the first NaN is kept); among equal values
// the first cell in row-major window order wins (a later cell must be
// strictly greater); an empty window (every cell in the padding; the shape
// rules exclude it) has no maximum.
#ifndef DRAGON_CUDA_POOL_WINDOW_H_
#define DRAGON_CUDA_POOL_WINDOW_H_

#include <cstdint>

#ifdef __CUDACC__
#define DGC_POOL_HD __host__ __device__
#else
#define DGC_POOL_HD
#endif

namespace dragon_cuda {

// The maximum of output window (i, j) of a max pool with geometry p (fields
// h, w, kh, kw, sh, sw, ph, pw, dh, dw, of a type convertible to I), reading
// x at xp[r * row_stride + c * col_stride]: false for an empty window, else
// true with *at the maximum's offset (in elements, from xp; negative
// strides give negative offsets). V is the type values are compared in
// (float for the 16-bit floats): each element is converted by
// static_cast<V>.
template <typename V, typename I, typename T, typename G>
DGC_POOL_HD inline bool MaxPoolWindowArgMax(const T* xp, const G& p, I i, I j, I row_stride,
                                            I col_stride, I* at) {
  const I h = static_cast<I>(p.h), w = static_cast<I>(p.w);
  const I kh = static_cast<I>(p.kh), kw = static_cast<I>(p.kw);
  const I r0 = i * static_cast<I>(p.sh) - static_cast<I>(p.ph);
  const I c0 = j * static_cast<I>(p.sw) - static_cast<I>(p.pw);
  const I dh = static_cast<I>(p.dh), dw = static_cast<I>(p.dw);
  bool found = false;
  I best = 0;
  V best_v = V(0);
  for (I a = 0; a < kh; ++a) {
    const I r = r0 + a * dh;
    if (r < 0 || r >= h) continue;
    for (I b = 0; b < kw; ++b) {
      const I c = c0 + b * dw;
      if (c < 0 || c >= w) continue;
      const I off = r * row_stride + c * col_stride;
      const V v = static_cast<V>(xp[off]);
      // v != v: v is NaN; best_v == best_v: the best so far is not.
      if (!found || v > best_v || (v != v && best_v == best_v)) {
        found = true;
        best = off;
        best_v = v;
      }
    }
  }
  *at = best;
  return found;
}

// The element strides of a 4-D tensor over its logical NCHW axes.
struct Strides4 {
  int64_t s0, s1, s2, s3;
};

// Output element t of the channels-last MaxPool2d kernel (pool.cu), which
// takes the output in NHWC order (channel fastest, so a warp reads
// neighbouring channels of one cell): t's logical indices (n, ch, oi, oj)
// for `channels` channels and an oh x ow output, then y[n, ch, oi, oj] =
// the window's maximum, reading x and writing y through their strides (y
// channels-last, or row-major when a compiled plan gives a row-major
// buffer); `empty` for a window with no cell (the shape rules exclude it).
template <typename V, typename T, typename G>
DGC_POOL_HD inline void MaxPoolChannelsLastAt(const T* x, T* y, const G& p, int64_t channels,
                                              const Strides4& xs, const Strides4& ys, int64_t t,
                                              T empty) {
  const int64_t ch = t % channels;
  int64_t rest = t / channels;
  const int64_t oj = rest % p.ow;
  rest /= p.ow;
  const int64_t oi = rest % p.oh;
  const int64_t n = rest / p.oh;
  const T* xp = x + n * xs.s0 + ch * xs.s1;
  int64_t at = 0;
  const bool found = MaxPoolWindowArgMax<V>(xp, p, oi, oj, xs.s2, xs.s3, &at);
  y[n * ys.s0 + ch * ys.s1 + oi * ys.s2 + oj * ys.s3] = found ? xp[at] : empty;
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_POOL_WINDOW_H_
