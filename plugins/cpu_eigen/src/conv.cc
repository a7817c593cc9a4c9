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
// Blocks and threads: Conv2d and ConvTranspose2d put the columns of a
// block of images side by side (col [K, images * P], sized to stay in L2
// and fixed by the geometry alone), so one GEMM covers the block; threads
// take contiguous ranges of blocks, each with its own scratch (taken once
// per call from the host's workspace), and the GEMMs then run
// single-threaded. A batch too small to share leaves the threads to the
// GEMM instead. The filter gradient sums over images: each thread stacks
// the columns of several images side by side so that one GEMM contracts
// over all of them, accumulates into its own partial dW, and the partials
// are added at the end. Im2col/col2im go through a zero-framed copy of each
// channel plane when there is padding, so no row needs clipping.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"
#include "int_gemm.h"
#include "widen_call.h"
#include "gemm/gemm.h"

// GCC rewrites short copy/fill loops into memcpy/memset calls; the
// attribute turns that off where rows are a few values. Other compilers
// (clang) have no such attribute and get the plain function.
#if defined(__GNUC__) && !defined(__clang__)
#define CPU_EIGEN_NO_LOOP_TO_CALL \
  __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define CPU_EIGEN_NO_LOOP_TO_CALL
#endif

namespace cpu_eigen {
namespace {

// ------------------------------------------------------------------ GEMM

template <typename T>
void Gemm(const GemmCall<T>& call) {
  GemmBest(call);
}

// int32 (quantized convolutions): exact, wrapping (int_gemm.h).
void Gemm(const GemmCall<int32_t>& call) { IntGemm(call); }

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

// The padded plane Im2Col reads: the image at offset (pt, pl) in a zero
// frame tall and wide enough for every window.
int64_t PaddedH(const Geom& g) {
  return std::max(g.pt + g.h + g.pb, (g.ho - 1) * g.sh + (g.kh - 1) * g.dh + 1);
}
int64_t PaddedW(const Geom& g) {
  return std::max(g.pl + g.w + g.pr, (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1);
}
bool Padded(const Geom& g) {
  return g.pt != 0 || g.pl != 0 || PaddedH(g) > g.h || PaddedW(g) > g.w;
}
// Scratch elements Im2Col needs (one padded plane), 0 without padding.
int64_t Im2ColScratch(const Geom& g) {
  return Padded(g) ? PaddedH(g) * PaddedW(g) : 0;
}

// Fills col (rows K, leading dimension ld, P columns used) from one group
// of one image (cg channels of h x w). `pad` is Im2ColScratch(g) elements.
// Each channel is first copied into a zero-framed plane (when there is
// padding), so every row of col is a plain (strided) copy: no clipping,
// no zero runs, no calls to memset/memcpy for rows of a few values (GCC's
// loop-to-call rewriting is turned off for this function).
template <typename T>
CPU_EIGEN_NO_LOOP_TO_CALL void Im2Col(
    const Geom& g, const T* img, T* col, int64_t ld, T* pad) {
  const int64_t cg = g.cg();
  const bool padded = Padded(g);
  const int64_t hp = padded ? PaddedH(g) : g.h;
  const int64_t wp = padded ? PaddedW(g) : g.w;
  if (padded) std::fill(pad, pad + hp * wp, T(0));
  for (int64_t c = 0; c < cg; ++c) {
    const T* plane = img + c * g.h * g.w;
    if (padded) {
      for (int64_t r = 0; r < g.h; ++r) {
        T* dst = pad + (r + g.pt) * wp + g.pl;
        const T* src = plane + r * g.w;
        for (int64_t j = 0; j < g.w; ++j) dst[j] = src[j];
      }
      plane = pad;
    }
    for (int64_t p = 0; p < g.kh; ++p) {
      for (int64_t q = 0; q < g.kw; ++q) {
        T* row = col + ((c * g.kh + p) * g.kw + q) * ld;
        const T* base = plane + p * g.dh * wp + q * g.dw;
        for (int64_t i = 0; i < g.ho; ++i) {
          T* dst = row + i * g.wo;
          const T* src = base + i * g.sh * wp;
          if (g.sw == 1) {
            for (int64_t j = 0; j < g.wo; ++j) dst[j] = src[j];
          } else {
            for (int64_t j = 0; j < g.wo; ++j) dst[j] = src[j * g.sw];
          }
        }
      }
    }
  }
}

// d += s; for int32 taken modulo 2^32 (the exact sum wrapped to two's
// complement, with no signed overflow).
template <typename T>
inline void AddTo(T& d, T s) {
  d += s;
}
inline void AddTo(int32_t& d, int32_t s) {
  d = static_cast<int32_t>(static_cast<uint32_t>(d) + static_cast<uint32_t>(s));
}

// Adds col (the layout Im2Col writes) into one group of one image. `pad`
// is Im2ColScratch(g) elements: with padding, each channel accumulates in
// a zero-framed plane whose interior is then added to the image, so no
// row is clipped.
template <typename T>
CPU_EIGEN_NO_LOOP_TO_CALL void Col2ImAdd(
    const Geom& g, const T* col, int64_t ld, T* img, T* pad) {
  const int64_t cg = g.cg();
  const bool padded = Padded(g);
  const int64_t wp = padded ? PaddedW(g) : g.w;
  const int64_t hp = padded ? PaddedH(g) : g.h;
  for (int64_t c = 0; c < cg; ++c) {
    T* plane = img + c * g.h * g.w;
    T* acc = plane;
    if (padded) {
      std::fill(pad, pad + hp * wp, T(0));
      acc = pad;
    }
    for (int64_t p = 0; p < g.kh; ++p) {
      for (int64_t q = 0; q < g.kw; ++q) {
        const T* row = col + ((c * g.kh + p) * g.kw + q) * ld;
        T* base = acc + p * g.dh * wp + q * g.dw;
        for (int64_t i = 0; i < g.ho; ++i) {
          const T* src = row + i * g.wo;
          T* dst = base + i * g.sh * wp;
          if (g.sw == 1) {
            for (int64_t j = 0; j < g.wo; ++j) AddTo(dst[j], src[j]);
          } else {
            for (int64_t j = 0; j < g.wo; ++j) AddTo(dst[j * g.sw], src[j]);
          }
        }
      }
    }
    if (padded) {
      for (int64_t r = 0; r < g.h; ++r) {
        const T* src = pad + (r + g.pt) * wp + g.pl;
        T* dst = plane + r * g.w;
        for (int64_t j = 0; j < g.w; ++j) AddTo(dst[j], src[j]);
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
// int32: wrapping adds.
void AddBias(const int32_t* b, int64_t o, int64_t p, int32_t* y) {
  for (int64_t c = 0; c < o; ++c) {
    for (int64_t i = 0; i < p; ++i) AddTo(y[c * p + i], b[c]);
  }
}

// ---------------------------------------------------------------- kernels

// Column elements per block of images for Conv2d and ConvTranspose2d
// (512 KB of float): col [K, images * P] plus its GEMM operand panels stay
// in L2. The block size depends on the geometry only, never on the thread
// count, so every output is computed by the same sequence of operations.
constexpr int64_t kBlockElements = int64_t{1} << 17;

// Images per block: 1 when col is the image itself (a 1x1 kernel) or one
// image already fills a block.
int64_t BlockImages(const Geom& g) {
  if (g.direct()) return 1;
  return std::max<int64_t>(
      1, std::min<int64_t>(g.n, kBlockElements / std::max<int64_t>(
                                                     1, g.k() * g.p())));
}

// Runs fn(thread, block) over the ceil(n / nb) blocks, split into `team`
// contiguous ranges of blocks.
template <typename Fn>
void ForEachBlock(int64_t blocks, int team, Fn&& fn) {
  ForEachRange(blocks, team, [&](int t, int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) fn(t, b);
  });
}

// How Conv2d and ConvTranspose2d split the batch: blocks of nb images, a
// team of threads, and each thread's scratch: col [K, nb * P] (unless the
// conv is direct), a middle [O/groups, nb * P] matrix when a block holds
// several images (GEMM output or stacked input), and a padded plane.
struct BlockPlan {
  int64_t nb, blocks, ld, col_size, mid_size, per_thread;
  int team;
};

BlockPlan PlanBlocks(const Geom& g) {
  BlockPlan b;
  const int64_t k = g.k(), p = g.p();
  b.nb = BlockImages(g);
  b.blocks = (g.n + b.nb - 1) / b.nb;
  b.team = static_cast<int>(
      std::min<int64_t>(BatchTeam(g.n, 2.0 * g.n * g.o * p * k), b.blocks));
  b.ld = b.nb * p;
  b.col_size = g.direct() ? 0 : k * b.ld;
  b.mid_size = b.nb > 1 ? g.og() * b.ld : 0;
  const int64_t pad_size = g.direct() ? 0 : Im2ColScratch(g);
  b.per_thread = b.col_size + b.mid_size + pad_size;
  return b;
}

// Conv2d: per block of nb images, col [K, nb * P] holds the columns of
// the images side by side, one GEMM gives out [O/groups, nb * P], which
// is scattered into NCHW (adding the bias on the way).
// Conv2d, and Conv2dBiasAct when relu is set (the activation is applied to
// each block of images right after it is computed, while it is in cache).
template <typename T>
void Conv2dImpl(dg::KernelContext& ctx, bool relu) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  const Geom g = MakeGeom(ctx, x, y, w.shape());
  if (y.numel() == 0) return;
  const T* xd = x.data<const T>();
  const T* wd = w.data<const T>();
  const T* bd = ctx.num_inputs() > 2 ? ctx.input(2).data<const T>() : nullptr;
  T* yd = y.data<T>();
  const int64_t k = g.k(), p = g.p(), og = g.og(), cg = g.cg();
  const bool direct = g.direct();
  const BlockPlan plan = PlanBlocks(g);
  const int64_t nb = plan.nb, ld = plan.ld;
  T* scratch = plan.per_thread ? ctx.workspace<T>(plan.team * plan.per_thread) : nullptr;
  ForEachBlock(plan.blocks, plan.team, [&](int t, int64_t blk) {
    T* col = scratch + t * plan.per_thread;
    T* out = col + plan.col_size;
    T* pad = out + plan.mid_size;
    const int64_t n0 = blk * nb, cnt = std::min(nb, g.n - n0);
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const T* img = xd + n0 * g.image() + gi * cg * g.h * g.w;
      const T* b = img;
      if (!direct) {
        for (int64_t j = 0; j < cnt; ++j) {
          Im2Col(g, img + j * g.image(), col + j * p, ld, pad);
        }
        b = col;
      }
      const T* a = wd + gi * og * k;
      if (nb == 1) {
        Product<T>(og, p, k, a, k, false, b, ld, false,
                   yd + n0 * g.window() + gi * og * p, p);
        continue;
      }
      Product<T>(og, cnt * p, k, a, k, false, b, ld, false, out, ld);
      for (int64_t j = 0; j < cnt; ++j) {
        T* dst = yd + (n0 + j) * g.window() + gi * og * p;
        for (int64_t o = 0; o < og; ++o) {
          const T* src = out + o * ld + j * p;
          T* d = dst + o * p;
          if (bd) {
            const T bias = bd[gi * og + o];
            for (int64_t i = 0; i < p; ++i) d[i] = src[i] + bias;
          } else {
            std::memcpy(d, src, p * sizeof(T));
          }
        }
      }
    }
    if (bd && nb == 1) AddBias(bd, g.o, p, yd + n0 * g.window());
    if (relu) {
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> v(
          yd + n0 * g.window(), cnt * g.window());
      // Relu's semantics: NaN stays NaN, -0 and negatives become +0.
      v = (v > T(0) || v.isNaN()).select(v, T(0));
    }
  });
}

template <typename T>
void Conv2d(dg::KernelContext& ctx) {
  Conv2dImpl<T>(ctx, false);
}

template <typename T>
void Conv2dBiasAct(dg::KernelContext& ctx) {
  Conv2dImpl<T>(ctx, ctx.s("activation") == "relu");
}

// ConvTranspose2d (x is the window side, y the image side of the
// geometry): per block of nb images, x's block is stacked into xs
// [O/groups, nb * P], one GEMM gives col [K, nb * P] = W_g^T * xs, and
// col2im adds each image's columns into its (zeroed) output.
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
  const BlockPlan plan = PlanBlocks(g);
  const int64_t nb = plan.nb, ld = plan.ld;
  T* scratch = plan.per_thread ? ctx.workspace<T>(plan.team * plan.per_thread) : nullptr;
  ForEachBlock(plan.blocks, plan.team, [&](int t, int64_t blk) {
    T* col = scratch + t * plan.per_thread;
    T* xs = col + plan.col_size;
    T* pad = xs + plan.mid_size;
    const int64_t n0 = blk * nb, cnt = std::min(nb, g.n - n0);
    T* img0 = yd + n0 * g.image();
    if (!direct) std::fill(img0, img0 + cnt * g.image(), T(0));
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const T* a = wd + gi * og * k;  // stored [og, k]: use transposed
      const T* b = xd + n0 * g.window() + gi * og * p;
      T* img = img0 + gi * cg * g.h * g.w;
      if (direct) {
        Product<T>(k, p, og, a, k, true, b, p, false, img, p);
        continue;
      }
      if (nb > 1) {
        for (int64_t j = 0; j < cnt; ++j) {
          for (int64_t o = 0; o < og; ++o) {
            std::memcpy(xs + o * ld + j * p, b + j * g.window() + o * p,
                        p * sizeof(T));
          }
        }
        b = xs;
      }
      Product<T>(k, cnt * p, og, a, k, true, b, ld, false, col, ld);
      for (int64_t j = 0; j < cnt; ++j) {
        Col2ImAdd(g, col + j * p, ld, img + j * g.image(), pad);
      }
    }
    if (bd) {
      for (int64_t j = 0; j < cnt; ++j) {
        AddBias(bd, g.c, g.h * g.w, img0 + j * g.image());
      }
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
  const int64_t pad_size = direct ? 0 : Im2ColScratch(g);
  const int64_t per_thread = col_size + dy_size + og * k + total + pad_size;
  T* scratch = ctx.workspace<T>(team * per_thread);
  ForEachRange(g.n, team, [&](int t, int64_t begin, int64_t end) {
    T* col = scratch + t * per_thread;
    T* dys = col + col_size;
    T* prod = dys + dy_size;
    T* acc = t == 0 ? dwd : prod + og * k;
    T* pad = prod + og * k + total;
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
            Im2Col(g, xd + (n0 + j) * g.image() + img_off, col + j * p, ld,
                   pad);
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

DG_KERNEL("Conv2d", "cpu", Conv2d, float, double, int32_t);
DG_KERNEL("Conv2dBiasAct", "cpu", Conv2dBiasAct, float, double);
DG_KERNEL("ConvTranspose2d", "cpu", ConvTranspose2d, float, double, int32_t);
DG_KERNEL("Conv2dBackpropFilter", "cpu", Conv2dBackpropFilter, float, double);
// float16 / bfloat16: the float32 kernel on widened copies (widen_call.h).
CPU_EIGEN_WIDENED_KERNEL("Conv2d", Conv2d);
CPU_EIGEN_WIDENED_KERNEL("Conv2dBiasAct", Conv2dBiasAct);
CPU_EIGEN_WIDENED_KERNEL("ConvTranspose2d", ConvTranspose2d);
CPU_EIGEN_WIDENED_KERNEL("Conv2dBackpropFilter", Conv2dBackpropFilter);

}  // namespace cpu_eigen
