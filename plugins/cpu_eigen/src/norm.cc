// Normalization kernels (schemas in dragon_core/src/ops/norm.cc):
// BatchNorm, LayerNorm, GroupNorm and their backward ops.
//
// Statistics are two-pass (mean, then the mean squared deviation) and
// accumulate in double for every dtype, except BatchNorm's in training
// mode: one pass of sums shifted by the channel's first value (see
// OnePassMoments), which BatchNormGrad also folds into its pass over dy;
// those sums are built per instruction set (norm_isa/stats.h). Each normalised group is handled by
// one task (BatchNorm: a channel; LayerNorm: a row; GroupNorm: a (sample,
// group) pair), and the parameter gradients are summed per channel or
// column in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.h"
#include "norm_isa/stats.h"
#include "rows.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sum of n values in double, four running sums.
template <typename T>
double SumOf(const T* p, int64_t n) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += static_cast<double>(p[i]);
    a1 += static_cast<double>(p[i + 1]);
    a2 += static_cast<double>(p[i + 2]);
    a3 += static_cast<double>(p[i + 3]);
  }
  for (; i < n; ++i) a0 += static_cast<double>(p[i]);
  return (a0 + a1) + (a2 + a3);
}

// Sum of (p[i] - mean)^2 in double.
template <typename T>
double SumSqDevOf(const T* p, int64_t n, double mean) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double d0 = static_cast<double>(p[i]) - mean;
    const double d1 = static_cast<double>(p[i + 1]) - mean;
    const double d2 = static_cast<double>(p[i + 2]) - mean;
    const double d3 = static_cast<double>(p[i + 3]) - mean;
    a0 += d0 * d0;
    a1 += d1 * d1;
    a2 += d2 * d2;
    a3 += d3 * d3;
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - mean;
    a0 += d * d;
  }
  return (a0 + a1) + (a2 + a3);
}

// Mean and biased variance of `nseg` segments of `len` values, segment k
// starting at base + k * stride. NaN for an empty set.
template <typename T>
void Moments(const T* base, int64_t nseg, int64_t stride, int64_t len,
             double* mean, double* var) {
  const double m = static_cast<double>(nseg * len);
  if (m == 0) {
    *mean = *var = kNaN;
    return;
  }
  double s = 0;
  for (int64_t k = 0; k < nseg; ++k) s += SumOf(base + k * stride, len);
  *mean = s / m;
  double q = 0;
  for (int64_t k = 0; k < nseg; ++k) {
    q += SumSqDevOf(base + k * stride, len, *mean);
  }
  *var = q / m;
}

inline double Rstd(double var, double eps) {
  return 1.0 / std::sqrt(var + eps);
}

// y[i] = (x[i] - mean) * scale + shift over n values.
template <typename T>
void Affine(const T* x, T* y, int64_t n, double mean, double scale,
            double shift) {
  const T m = static_cast<T>(mean), a = static_cast<T>(scale),
          b = static_cast<T>(shift);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * a + b;
}

// [N, C, S] view of a rank >= 2 tensor.
struct NCS {
  int64_t n, c, s;
};

NCS ViewNCS(const dg::TensorRef& x) {
  NCS v{x.dim(0), x.dim(1), 1};
  for (int32_t i = 2; i < x.ndim(); ++i) v.s *= x.dim(i);
  return v;
}

// ---------------------------------------------------------------- BatchNorm

// Mean and biased variance of channel c: of the batch (training) or the
// running statistics.
template <typename T>
void ChannelMoments(const T* x, const NCS& v, int64_t c, bool training,
                    const T* rmean, const T* rvar, double* mean, double* var) {
  if (training) {
    Moments(x + c * v.s, v.n, v.c * v.s, v.s, mean, var);
  } else {
    *mean = static_cast<double>(rmean[c]);
    *var = static_cast<double>(rvar[c]);
  }
}

// Training-mode statistics in one pass over x (and dy). The sums are of
// d = x - shift in double, shift being the channel's first value, so the
// cancellation in var = E[d^2] - E[d]^2 grows with (mean - shift)^2 / var,
// the first value's distance from the mean in units of the spread, not
// with |mean| / spread (a channel at 1e4 +- 1 keeps its variance). A
// non-finite first value falls back to the two-pass path (x - inf would
// turn an infinite mean into NaN).
template <typename T>
bool OnePassShift(const T* x, int64_t m, double* shift) {
  if (m == 0) return false;
  *shift = static_cast<double>(x[0]);
  return std::isfinite(*shift);
}

// The build of the shifted sums (norm_isa/stats.h) for this CPU.
template <typename T>
void ShiftedSums(const T* base, int64_t nseg, int64_t stride, int64_t len,
                 double shift, double* out) {
#ifdef CPU_EIGEN_X86_ISAS
  static const int level = DetectIsaLevel();
  if (level >= 4) {
    return normstats_v4::ShiftedSums(base, nseg, stride, len, shift, out);
  }
  if (level == 3) {
    return normstats_v3::ShiftedSums(base, nseg, stride, len, shift, out);
  }
#endif
  normstats_base::ShiftedSums(base, nseg, stride, len, shift, out);
}

template <typename T>
void ShiftedGradSums(const T* x, const T* dy, int64_t nseg, int64_t stride,
                     int64_t len, double shift, double* out) {
#ifdef CPU_EIGEN_X86_ISAS
  static const int level = DetectIsaLevel();
  if (level >= 4) {
    return normstats_v4::ShiftedGradSums(x, dy, nseg, stride, len, shift,
                                         out);
  }
  if (level == 3) {
    return normstats_v3::ShiftedGradSums(x, dy, nseg, stride, len, shift,
                                         out);
  }
#endif
  normstats_base::ShiftedGradSums(x, dy, nseg, stride, len, shift, out);
}

// Mean and biased variance of a channel (nseg segments of len values,
// segment k at base + k * stride) from its shifted sums; false (nothing
// written) where OnePassShift declines.
template <typename T>
bool OnePassMoments(const T* base, int64_t nseg, int64_t stride, int64_t len,
                    double* mean, double* var) {
  const int64_t m = nseg * len;
  double shift;
  if (!OnePassShift(base, m, &shift)) return false;
  double s[2];
  ShiftedSums(base, nseg, stride, len, shift, s);
  const double e1 = s[0] / static_cast<double>(m);
  *mean = shift + e1;
  *var = std::max(s[1] / static_cast<double>(m) - e1 * e1, 0.0);
  return true;
}

template <typename T>
void BatchNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = ViewNCS(xt);
  const bool training = ctx.b("training");
  const double eps = ctx.f("eps");
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* beta = ctx.input(2).data<const T>();
  const T* rmean = ctx.input(3).data<const T>();
  const T* rvar = ctx.input(4).data<const T>();
  T* y = ctx.output(0).data<T>();
  T* out_mean = ctx.output(1).data<T>();
  T* out_var = ctx.output(2).data<T>();
  // Per channel: mean and scale = gamma / sqrt(var + eps), computed once
  // (not per (sample, channel) row: a square root and a division per row
  // cost more than the row itself on small feature maps).
  double* stats = ctx.workspace<double>(2 * v.c);
  ParallelFor(
      v.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          double mean, var;
          if (!training || !OnePassMoments(x + c * v.s, v.n, v.c * v.s, v.s,
                                           &mean, &var)) {
            ChannelMoments(x, v, c, training, rmean, rvar, &mean, &var);
          }
          stats[2 * c] = mean;
          stats[2 * c + 1] = static_cast<double>(gamma[c]) * Rstd(var, eps);
          out_mean[c] = training ? static_cast<T>(mean) : rmean[c];
          out_var[c] = training ? static_cast<T>(var) : rvar[c];
        }
      },
      training ? 2 * v.n * v.s : 1);
  ParallelFor(
      v.n * v.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const int64_t c = q % v.c;
          Affine(x + q * v.s, y + q * v.s, v.s, stats[2 * c],
                 stats[2 * c + 1], static_cast<double>(beta[c]));
        }
      },
      v.s);
}

// dx = a * dy + b * (x - mean) + k per channel, with
//   training:  a = gamma rstd,  b = (2 dvar - gamma rstd^2 dgamma) / M,
//              k = (dmean - gamma rstd dbeta) / M
//   inference: a = gamma rstd,  b = k = 0
// where dgamma = rstd sum(dy (x - mean)), dbeta = sum(dy), M = N * S.
template <typename T>
void BatchNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = ViewNCS(xt);
  const bool training = ctx.b("training");
  const double eps = ctx.f("eps");
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* rmean = ctx.input(2).data<const T>();
  const T* rvar = ctx.input(3).data<const T>();
  const T* dy = ctx.input(4).data<const T>();
  const T* dmean = ctx.input(5).data<const T>();
  const T* dvar = ctx.input(6).data<const T>();
  T* dx = ctx.output(0).data<T>();
  T* dgamma = ctx.output(1).data<T>();
  T* dbeta = ctx.output(2).data<T>();
  double* coef = ctx.workspace<double>(4 * v.c);  // mean, a, b, k
  const int64_t stride = v.c * v.s;
  const double m = static_cast<double>(v.n * v.s);
  ParallelFor(
      v.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          double mean, var, shift;
          double sum_dy = 0, sum_dy_xc = 0;
          if (training && OnePassShift(x + c * v.s, v.n * v.s, &shift)) {
            // One pass over x and dy: sum(dy (x - mean)) is
            // sum(dy d) - (mean - shift) sum(dy) with d = x - shift.
            double s[4];
            ShiftedGradSums(x + c * v.s, dy + c * v.s, v.n, stride, v.s,
                            shift, s);
            const double e1 = s[0] / m;
            mean = shift + e1;
            var = std::max(s[1] / m - e1 * e1, 0.0);
            sum_dy = s[2];
            sum_dy_xc = s[3] - e1 * sum_dy;
          } else {
            ChannelMoments(x, v, c, training, rmean, rvar, &mean, &var);
            for (int64_t n = 0; n < v.n; ++n) {
              const T* xp = x + c * v.s + n * stride;
              const T* gp = dy + c * v.s + n * stride;
              for (int64_t i = 0; i < v.s; ++i) {
                const double g = static_cast<double>(gp[i]);
                sum_dy += g;
                sum_dy_xc += g * (static_cast<double>(xp[i]) - mean);
              }
            }
          }
          const double rstd = Rstd(var, eps);
          const double gr = static_cast<double>(gamma[c]) * rstd;
          const double dg = m == 0 ? 0.0 : sum_dy_xc * rstd;
          dgamma[c] = static_cast<T>(dg);
          dbeta[c] = static_cast<T>(sum_dy);
          coef[4 * c] = mean;
          coef[4 * c + 1] = gr;
          if (training && m > 0) {
            coef[4 * c + 2] =
                (2.0 * static_cast<double>(dvar[c]) - gr * rstd * dg) / m;
            coef[4 * c + 3] = (static_cast<double>(dmean[c]) - gr * sum_dy) / m;
          } else {
            coef[4 * c + 2] = coef[4 * c + 3] = 0.0;
          }
        }
      },
      (training ? 4 : 2) * v.n * v.s);
  ParallelFor(
      v.n * v.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const double* k = coef + 4 * (q % v.c);
          const T mean = static_cast<T>(k[0]), a = static_cast<T>(k[1]),
                  b = static_cast<T>(k[2]), shift = static_cast<T>(k[3]);
          const T* xp = x + q * v.s;
          const T* gp = dy + q * v.s;
          T* out = dx + q * v.s;
          for (int64_t i = 0; i < v.s; ++i) {
            out[i] = a * gp[i] + b * (xp[i] - mean) + shift;
          }
        }
      },
      2 * v.s);
}

// ---------------------------------------------------------------- LayerNorm

// x viewed as [rows, cols] with cols = prod(x.shape[axis:]).
void RowsCols(const dg::KernelContext& ctx, const dg::TensorRef& x,
              int64_t* rows, int64_t* cols) {
  const int64_t axis = NormAxis(ctx.i("axis"), x.ndim());
  *rows = 1;
  *cols = 1;
  for (int32_t i = 0; i < x.ndim(); ++i) (i < axis ? *rows : *cols) *= x.dim(i);
}

template <typename T>
void LayerNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  int64_t rows, cols;
  RowsCols(ctx, xt, &rows, &cols);
  if (rows * cols == 0) return;
  const double eps = ctx.f("eps");
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* beta = ctx.input(2).data<const T>();
  T* y = ctx.output(0).data<T>();
  const RowKernels<T>& k = RowKernelsFor<T>();
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        k.layer_norm(x + begin * cols, gamma, beta, y + begin * cols,
                     end - begin, cols, eps);
      },
      4 * cols);
}

// The input gradient of LayerNorm and GroupNorm over one normalised group,
// with g = dy * gamma and xhat = (x - mean) * rstd:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// A group may be walked in several runs of values (GroupNorm: one per
// channel); `gamma(i)` is the scale of value i of a run.
//
// Adds sum(g) and sum(g * xhat) over one run of n values to *s1 and *s2.
template <typename T, typename Gamma>
void AddGradSums(const T* xp, const T* gp, int64_t n, Gamma gamma, double mean,
                 double rstd, double* s1, double* s2) {
  double a = *s1, b = *s2;
  for (int64_t i = 0; i < n; ++i) {
    const double g =
        static_cast<double>(gp[i]) * static_cast<double>(gamma(i));
    a += g;
    b += g * (static_cast<double>(xp[i]) - mean) * rstd;
  }
  *s1 = a;
  *s2 = b;
}

// Writes dx over one run of n values; k1 = mean(g), k2 = mean(g * xhat).
template <typename T, typename Gamma>
void ApplyInputGrad(const T* xp, const T* gp, T* out, int64_t n, Gamma gamma,
                    T mean, T rstd, T k1, T k2) {
  for (int64_t i = 0; i < n; ++i) {
    const T xhat = (xp[i] - mean) * rstd;
    out[i] = rstd * (gp[i] * gamma(i) - k1 - xhat * k2);
  }
}

// Number of row blocks LayerNormGrad splits the rows into: each block adds
// its rows' parameter gradients into its own partial sums, which are then
// combined in block order. It depends on the shape only (at least 8 rows a
// block, at most 32 blocks, at most 4 M partial values), so the result does
// not depend on the thread count.
int64_t LayerNormGradBlocks(int64_t rows, int64_t cols) {
  int64_t blocks = std::min<int64_t>(32, rows / 8);
  blocks = std::min<int64_t>(blocks, (int64_t{1} << 22) / (2 * cols));
  return std::max<int64_t>(1, blocks);
}

// Per row, with g = dy * gamma and xhat = (x - mean) * rstd:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// and dgamma = sum_r dy * xhat, dbeta = sum_r dy, in one pass over the rows
// (RowKernels::layer_norm_grad, rows.h).
template <typename T>
void LayerNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  int64_t rows, cols;
  RowsCols(ctx, xt, &rows, &cols);
  const double eps = ctx.f("eps");
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  T* dgamma = ctx.output(1).data<T>();
  T* dbeta = ctx.output(2).data<T>();
  if (cols == 0) return;
  const int64_t blocks = LayerNormGradBlocks(rows, cols);
  // Partial sums of block b: dgamma at part + 2 * b * cols, dbeta after it.
  double* part = ctx.workspace<double>(2 * blocks * cols);
  const RowKernels<T>& k = RowKernelsFor<T>();
  ParallelFor(
      blocks,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t r0 = rows * b / blocks, r1 = rows * (b + 1) / blocks;
          double* pg = part + 2 * b * cols;
          double* pb = pg + cols;
          for (int64_t j = 0; j < 2 * cols; ++j) pg[j] = 0;
          k.layer_norm_grad(x + r0 * cols, gamma, dy + r0 * cols,
                            dx + r0 * cols, r1 - r0, cols, eps, pg, pb);
        }
      },
      8 * cols * std::max<int64_t>(1, rows / blocks));
  ParallelFor(
      cols,
      [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          double g = 0, b = 0;
          for (int64_t q = 0; q < blocks; ++q) {
            g += part[2 * q * cols + j];
            b += part[(2 * q + 1) * cols + j];
          }
          dgamma[j] = static_cast<T>(g);
          dbeta[j] = static_cast<T>(b);
        }
      },
      2 * blocks);
}

// ---------------------------------------------------------------- GroupNorm

template <typename T>
void GroupNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = ViewNCS(xt);
  const int64_t groups = ctx.i("groups"), cg = v.c / groups;
  const double eps = ctx.f("eps");
  if (xt.numel() == 0) return;
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* beta = ctx.input(2).data<const T>();
  T* y = ctx.output(0).data<T>();
  ParallelFor(
      v.n * groups,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const int64_t offset = q * cg * v.s;
          double mean, var;
          Moments(x + offset, 1, 0, cg * v.s, &mean, &var);
          const double rstd = Rstd(var, eps);
          for (int64_t k = 0; k < cg; ++k) {
            const int64_t c = (q % groups) * cg + k;
            Affine(x + offset + k * v.s, y + offset + k * v.s, v.s, mean,
                   static_cast<double>(gamma[c]) * rstd,
                   static_cast<double>(beta[c]));
          }
        }
      },
      4 * cg * v.s);
}

// Per (sample, group), with g = dy * gamma[c] and xhat = (x - mean) * rstd:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
// dgamma[c] = sum_{n, s} dy * xhat, dbeta[c] = sum_{n, s} dy.
template <typename T>
void GroupNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = ViewNCS(xt);
  const int64_t groups = ctx.i("groups"), cg = v.c / groups;
  const double eps = ctx.f("eps");
  const T* x = xt.data<const T>();
  const T* gamma = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  T* dgamma = ctx.output(1).data<T>();
  T* dbeta = ctx.output(2).data<T>();
  const int64_t len = cg * v.s;  // elements per (sample, group)
  double* stats = ctx.workspace<double>(2 * v.n * groups);
  ParallelFor(
      v.n * groups,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const int64_t offset = q * len;
          double mean, var;
          Moments(x + offset, 1, 0, len, &mean, &var);
          const double rstd = Rstd(var, eps);
          stats[2 * q] = mean;
          stats[2 * q + 1] = rstd;
          if (len == 0) continue;
          double s1 = 0, s2 = 0;
          for (int64_t k = 0; k < cg; ++k) {
            const T gm = gamma[(q % groups) * cg + k];
            AddGradSums(x + offset + k * v.s, dy + offset + k * v.s, v.s,
                        [gm](int64_t) { return gm; }, mean, rstd, &s1, &s2);
          }
          const T m = static_cast<T>(mean), rs = static_cast<T>(rstd);
          const T k1 = static_cast<T>(s1 / len), k2 = static_cast<T>(s2 / len);
          for (int64_t k = 0; k < cg; ++k) {
            const T gm = gamma[(q % groups) * cg + k];
            const int64_t at = offset + k * v.s;
            ApplyInputGrad(x + at, dy + at, dx + at, v.s,
                           [gm](int64_t) { return gm; }, m, rs, k1, k2);
          }
        }
      },
      6 * len);
  ParallelFor(
      v.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          double g = 0, b = 0;
          for (int64_t n = 0; n < v.n; ++n) {
            const int64_t q = n * groups + c / cg;
            const double mean = stats[2 * q], rstd = stats[2 * q + 1];
            const T* xp = x + (n * v.c + c) * v.s;
            const T* gp = dy + (n * v.c + c) * v.s;
            for (int64_t i = 0; i < v.s; ++i) {
              const double d = static_cast<double>(gp[i]);
              g += d * (static_cast<double>(xp[i]) - mean) * rstd;
              b += d;
            }
          }
          dgamma[c] = static_cast<T>(g);
          dbeta[c] = static_cast<T>(b);
        }
      },
      2 * v.n * v.s);
}

}  // namespace

DG_KERNEL("BatchNorm", "cpu", BatchNorm, float, double);
DG_KERNEL("BatchNormGrad", "cpu", BatchNormGrad, float, double);
DG_KERNEL("LayerNorm", "cpu", LayerNorm, float, double);
DG_KERNEL("LayerNormGrad", "cpu", LayerNormGrad, float, double);
DG_KERNEL("GroupNorm", "cpu", GroupNorm, float, double);
DG_KERNEL("GroupNormGrad", "cpu", GroupNormGrad, float, double);
// float16 / bfloat16: the float32 kernel on widened copies (widen_call.h).
CPU_EIGEN_WIDENED_KERNEL("BatchNorm", BatchNorm);
CPU_EIGEN_WIDENED_KERNEL("BatchNormGrad", BatchNormGrad);
CPU_EIGEN_WIDENED_KERNEL("LayerNorm", LayerNorm);
CPU_EIGEN_WIDENED_KERNEL("LayerNormGrad", LayerNormGrad);
CPU_EIGEN_WIDENED_KERNEL("GroupNorm", GroupNorm);
CPU_EIGEN_WIDENED_KERNEL("GroupNormGrad", GroupNormGrad);

}  // namespace cpu_eigen
