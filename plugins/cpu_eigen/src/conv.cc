// Convolution kernels (NCHW): Conv2d, ConvTranspose2d, Conv2dBackpropFilter.
//
// All three are im2col/col2im around the GEMM of src/gemm/. For one image
// and one channel group, the "column" matrix col[K, P] holds, in row
// (c, p, q) and column (i, j), the image pixel under kernel tap (p, q) of
// channel c when the window sits at output position (i, j) (zero where the
// tap falls into the padding); K = C/groups * kh * kw and P = Ho * Wo.
// Then, with W_g the group's filter seen as an [O/groups, K] matrix:
//   Conv2d               y_g  = W_g  * col                    (im2col)
//   ConvTranspose2d      col  = W_g^T * x_g, y += col2im(col)  (col2im)
//   Conv2dBackpropFilter dW_g = sum_n dy_g * col^T            (im2col)
// A 1x1 kernel with unit strides and no padding needs no col: the image
// itself is the [C/groups, H * W] matrix.
//
// Threads: the batch is split into one contiguous range of images per
// thread, each with its own scratch (taken once per call from the host's
// workspace), and the GEMMs then run single-threaded. A batch too small to
// share leaves the threads to the GEMM instead. The filter gradient sums
// over images: each thread stacks the columns of several images side by
// side so that one GEMM contracts over all of them, accumulates into its
// own partial dW, and the partials are added at the end.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"
#include "gemm/gemm.h"

namespace cpu_eigen {
namespace {

// ------------------------------------------------------------------ GEMM

template <typename T>
void Gemm(const GemmCall<T>& call) {
  static const int level = DetectIsaLevel();
  if (level >= 4) {
    gemm_v4::Gemm(call);
  } else if (level == 3) {
    gemm_v3::Gemm(call);
  } else {
    gemm_v2::Gemm(call);
  }
}

// C[n x m] = op(A)[n x k] * op(B)[k x m], one product.
template <typename T>
void Product(int64_t n, int64_t m, int64_t k, const T* a, int64_t lda,
             bool trans_a, const T* b, int64_t ldb, bool trans_b, T* c,
             int64_t ldc) {
  GemmCall<T> call{};
  call.batch = 1;
  call.n = n;
  call.m = m;
  call.k = k;
  call.a = a;
  call.lda = std::max<int64_t>(lda, 1);
  call.trans_a = trans_a;
  call.b = b;
  call.ldb = std::max<int64_t>(ldb, 1);
  call.trans_b = trans_b;
  call.c = c;
  call.ldc = std::max<int64_t>(ldc, 1);
  call.c_stride = n * m;
  Gemm(call);
}

// -------------------------------------------------------------- geometry

// The image side (Conv2d's input) is [n, c, h, w]; the window side (its
// output) is [n, o, ho, wo]; the filter is [o, c / groups, kh, kw].
struct Geom {
  int64_t n, c, h, w;
  int64_t o, ho, wo;
  int64_t kh, kw;
  int64_t sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;
  int64_t groups;

  int64_t cg() const { return c / groups; }    // image channels per group
  int64_t og() const { return o / groups; }    // window channels per group
  int64_t k() const { return cg() * kh * kw; }  // rows of col
  int64_t p() const { return ho * wo; }        // columns of col per image
  int64_t image() const { return c * h * w; }  // elements per image
  int64_t window() const { return o * ho * wo; }
  // A 1x1 kernel at unit stride without padding: col is the image itself.
  bool direct() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 &&
           pb == 0 && pr == 0;
  }
};

// Geometry from the attributes, the image-side and window-side tensors and
// the filter shape (as given or as Conv2dBackpropFilter's attribute).
Geom MakeGeom(const dg::KernelContext& ctx, const dg::TensorRef& image,
              const dg::TensorRef& window, const std::vector<int64_t>& filter) {
  const std::vector<int64_t> s = ctx.ints("strides"), d = ctx.ints("dilations");
  const std::vector<int64_t> pads = ctx.ints("pads");
  DG_CHECK(s.size() == 2 && d.size() == 2 &&
               (pads.size() == 2 || pads.size() == 4) && image.ndim() == 4 &&
               window.ndim() == 4 && filter.size() == 4,
           DG_INTERNAL, ctx.op_name(), ": malformed attributes or shapes");
  Geom g;
  g.n = image.dim(0), g.c = image.dim(1);
  g.h = image.dim(2), g.w = image.dim(3);
  g.o = window.dim(1), g.ho = window.dim(2), g.wo = window.dim(3);
  g.kh = filter[2], g.kw = filter[3];
  g.sh = s[0], g.sw = s[1], g.dh = d[0], g.dw = d[1];
  g.pt = pads[0], g.pl = pads[1];
  g.pb = pads.size() == 4 ? pads[2] : pads[0];
  g.pr = pads.size() == 4 ? pads[3] : pads[1];
  g.groups = ctx.i("groups");
  DG_CHECK(g.groups >= 1 && g.c % g.groups == 0 && g.o % g.groups == 0 &&
               filter[0] == g.o && filter[1] * g.groups == g.c,
           DG_INTERNAL, ctx.op_name(), ": channels disagree with the filter");
  return g;
}

// The output columns [lo, hi) whose tap at offset `off` (= q * dilation -
// pad) lands inside an image row of `size` pixels, at stride `stride`.
void ValidRange(int64_t off, int64_t size, int64_t stride, int64_t count,
                int64_t* lo, int64_t* hi) {
  // i * stride + off >= 0  and  i * stride + off <= size - 1.
  *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  *hi = off > size - 1 ? 0 : (size - 1 - off) / stride + 1;
  *lo = std::min(*lo, count);
  *hi = std::max(*lo, std::min(*hi, count));
}

// Fills col (rows K, leading dimension ld, P columns used) from one group
// of one image (cg channels of h x w).
template <typename T>
void Im2Col(const Geom& g, const T* img, T* col, int64_t ld) {
  const int64_t cg = g.cg();
  for (int64_t c = 0; c < cg; ++c) {
    const T* plane = img + c * g.h * g.w;
    for (int64_t p = 0; p < g.kh; ++p) {
      for (int64_t q = 0; q < g.kw; ++q) {
        T* row = col + ((c * g.kh + p) * g.kw + q) * ld;
        const int64_t col_off = q * g.dw - g.pl;
        int64_t jlo, jhi;
        ValidRange(col_off, g.w, g.sw, g.wo, &jlo, &jhi);
        for (int64_t i = 0; i < g.ho; ++i) {
          T* dst = row + i * g.wo;
          const int64_t r = i * g.sh - g.pt + p * g.dh;
          if (r < 0 || r >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = plane + r * g.w;  // src[j * sw + col_off]
          std::fill(dst, dst + jlo, T(0));
          if (g.sw == 1) {
            // Rows are short (often < 32 values): an inlined loop beats
            // a call to memcpy.
            for (int64_t j = jlo; j < jhi; ++j) dst[j] = src[j + col_off];
          } else {
            for (int64_t j = jlo; j < jhi; ++j) {
              dst[j] = src[j * g.sw + col_off];
            }
          }
          std::fill(dst + jhi, dst + g.wo, T(0));
        }
      }
    }
  }
}

// Adds col (the layout Im2Col writes) into one group of one image.
template <typename T>
void Col2ImAdd(const Geom& g, const T* col, int64_t ld, T* img) {
  const int64_t cg = g.cg();
  for (int64_t c = 0; c < cg; ++c) {
    T* plane = img + c * g.h * g.w;
    for (int64_t p = 0; p < g.kh; ++p) {
      for (int64_t q = 0; q < g.kw; ++q) {
        const T* row = col + ((c * g.kh + p) * g.kw + q) * ld;
        const int64_t col_off = q * g.dw - g.pl;
        int64_t jlo, jhi;
        ValidRange(col_off, g.w, g.sw, g.wo, &jlo, &jhi);
        for (int64_t i = 0; i < g.ho; ++i) {
          const int64_t r = i * g.sh - g.pt + p * g.dh;
          if (r < 0 || r >= g.h) continue;
          const T* src = row + i * g.wo;
          T* dst = plane + r * g.w;  // dst[j * sw + col_off]
          if (g.sw == 1) {
            for (int64_t j = jlo; j < jhi; ++j) dst[j + col_off] += src[j];
          } else {
            for (int64_t j = jlo; j < jhi; ++j) {
              dst[j * g.sw + col_off] += src[j];
            }
          }
        }
      }
    }
  }
}

// --------------------------------------------------------------- threads

// Total work below which a call stays on the calling thread.
constexpr double kSerialFlops = 256.0 * 1024;

// How many threads share the batch of `n` images (1: the GEMMs may use
// the threads themselves).
int BatchTeam(int64_t n, double flops) {
  if (n <= 1 || flops < kSerialFlops || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), n));
}

// Runs fn(thread, begin, end) over [0, n) split into `team` ranges.
template <typename Fn>
void ForEachRange(int64_t n, int team, Fn&& fn) {
  if (team <= 1) {
    fn(0, int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(team) schedule(static)
  for (int t = 0; t < team; ++t) fn(t, n * t / team, n * (t + 1) / team);
}

// Adds b[channel] to every value of the [o, p] window of one image.
template <typename T>
void AddBias(const T* b, int64_t o, int64_t p, T* y) {
  for (int64_t c = 0; c < o; ++c) {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(y + c * p, p) += b[c];
  }
}

// ---------------------------------------------------------------- kernels

template <typename T>
void Conv2d(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  const Geom g = MakeGeom(ctx, x, y, w.shape());
  if (y.numel() == 0) return;
  const T* xd = x.data<const T>();
  const T* wd = w.data<const T>();
  const T* bd = ctx.num_inputs() > 2 ? ctx.input(2).data<const T>() : nullptr;
  T* yd = y.data<T>();
  const int64_t k = g.k(), p = g.p(), og = g.og(), cg = g.cg();
  const bool direct = g.direct();
  const int team = BatchTeam(g.n, 2.0 * g.n * g.o * p * k);
  T* scratch = direct ? nullptr : ctx.workspace<T>(team * k * p);
  ForEachRange(g.n, team, [&](int t, int64_t begin, int64_t end) {
    T* col = direct ? nullptr : scratch + t * k * p;
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const T* img = xd + n * g.image() + gi * cg * g.h * g.w;
        const T* b = img;
        if (!direct) {
          Im2Col(g, img, col, p);
          b = col;
        }
        Product<T>(og, p, k, wd + gi * og * k, k, false, b, p, false,
                   yd + n * g.window() + gi * og * p, p);
      }
      if (bd) AddBias(bd, g.o, p, yd + n * g.window());
    }
  });
}

// x is the window side, y the image side of the geometry.
template <typename T>
void ConvTranspose2d(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  // The filter [C_x, O / groups, kh, kw] is a Conv2d filter from y to x.
  const Geom g = MakeGeom(ctx, y, x, w.shape());
  if (y.numel() == 0) return;
  const T* xd = x.data<const T>();
  const T* wd = w.data<const T>();
  const T* bd = ctx.num_inputs() > 2 ? ctx.input(2).data<const T>() : nullptr;
  T* yd = y.data<T>();
  const int64_t k = g.k(), p = g.p(), og = g.og(), cg = g.cg();
  const bool direct = g.direct();
  const int team = BatchTeam(g.n, 2.0 * g.n * g.o * p * k);
  T* scratch = direct ? nullptr : ctx.workspace<T>(team * k * p);
  ForEachRange(g.n, team, [&](int t, int64_t begin, int64_t end) {
    T* col = direct ? nullptr : scratch + t * k * p;
    for (int64_t n = begin; n < end; ++n) {
      T* img_n = yd + n * g.image();
      if (!direct) std::fill(img_n, img_n + g.image(), T(0));
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        T* img = img_n + gi * cg * g.h * g.w;
        const T* a = wd + gi * og * k;  // stored [og, k]: use transposed
        const T* b = xd + n * g.window() + gi * og * p;
        if (direct) {
          Product<T>(k, p, og, a, k, true, b, p, false, img, p);
        } else {
          Product<T>(k, p, og, a, k, true, b, p, false, col, p);
          Col2ImAdd(g, col, p, img);
        }
      }
      if (bd) AddBias(bd, g.c, g.h * g.w, img_n);
    }
  });
}

// Elements of stacked columns a thread builds per GEMM (about 2 MB of
// float): large enough that one GEMM contracts over many images, small
// enough to stay in cache.
constexpr int64_t kStackElements = int64_t{1} << 19;

template <typename T>
void Conv2dBackpropFilter(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dw = ctx.output(0);
  const Geom g = MakeGeom(ctx, x, dy, dw.shape());
  T* dwd = dw.data<T>();
  const int64_t total = dw.numel();
  std::fill(dwd, dwd + total, T(0));
  if (total == 0 || g.n == 0 || g.p() == 0) return;
  const T* xd = x.data<const T>();
  const T* dyd = dy.data<const T>();
  const int64_t k = g.k(), p = g.p(), og = g.og(), cg = g.cg();
  const bool direct = g.direct();
  const int team = BatchTeam(g.n, 2.0 * g.n * g.o * p * k);
  // Images stacked per GEMM (1 when col is the image itself).
  const int64_t per_team = (g.n + team - 1) / team;
  const int64_t stack =
      direct ? 1
             : std::max<int64_t>(
                   1, std::min<int64_t>(per_team, kStackElements / (k * p)));
  const int64_t ld = stack * p;
  // Per thread: stacked col [k, ld], stacked dy [og, ld], a product
  // [og, k] and (beyond thread 0, which accumulates into dw) a partial dW.
  const int64_t col_size = direct ? 0 : k * ld;
  const int64_t dy_size = stack > 1 ? og * ld : 0;
  const int64_t per_thread = col_size + dy_size + og * k + total;
  T* scratch = ctx.workspace<T>(team * per_thread);
  ForEachRange(g.n, team, [&](int t, int64_t begin, int64_t end) {
    T* col = scratch + t * per_thread;
    T* dys = col + col_size;
    T* prod = dys + dy_size;
    T* acc = t == 0 ? dwd : prod + og * k;
    if (t != 0) std::fill(acc, acc + total, T(0));
    for (int64_t n0 = begin; n0 < end; n0 += stack) {
      const int64_t cnt = std::min(stack, end - n0);
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const int64_t img_off = gi * cg * g.h * g.w, win_off = gi * og * p;
        const T* b = col;
        const T* a = dys;
        if (direct) {
          b = xd + n0 * g.image() + img_off;
        } else {
          for (int64_t j = 0; j < cnt; ++j) {
            Im2Col(g, xd + (n0 + j) * g.image() + img_off, col + j * p, ld);
          }
        }
        if (stack == 1) {
          a = dyd + n0 * g.window() + win_off;
        } else {
          for (int64_t j = 0; j < cnt; ++j) {
            const T* src = dyd + (n0 + j) * g.window() + win_off;
            for (int64_t o = 0; o < og; ++o) {
              std::memcpy(dys + o * ld + j * p, src + o * p, p * sizeof(T));
            }
          }
        }
        // prod[og, k] = dy[og, cnt * p] * col[k, cnt * p]^T.
        Product<T>(og, k, cnt * p, a, ld, false, b, ld, true, prod, k);
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(acc + gi * og * k,
                                                       og * k) +=
            Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(prod, og * k);
      }
    }
  });
  for (int t = 1; t < team; ++t) {
    const T* part = scratch + t * per_thread + col_size + dy_size + og * k;
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(dwd, total) +=
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(part, total);
  }
}

}  // namespace

DG_KERNEL("Conv2d", "cpu", Conv2d, float, double);
DG_KERNEL("ConvTranspose2d", "cpu", ConvTranspose2d, float, double);
DG_KERNEL("Conv2dBackpropFilter", "cpu", Conv2dBackpropFilter, float, double);

}  // namespace cpu_eigen
