// BatchNorm, BatchNormGrad, LayerNorm and LayerNormGrad on oneDNN's
// batch_normalization and layer_normalization primitives (schemas in
// dragon_core/src/ops/norm.cc), float32.
//
//   * BatchNorm normalizes x [N, C, *] per channel. Only calls whose
//     trailing axes have one element (x is [N, C] in effect, the input of
//     a BatchNorm after a linear layer) are served: oneDNN 3.2 runs them
//     with its JIT kernel (bnorm_jit), while on a plain NCHW tensor it
//     falls back to a C++ loop (ncsp_bnorm) 2-4x slower than cpu_eigen
//     (docs/nn_ops.md), so those calls are declined. LayerNorm
//     normalizes x.shape[axis:]; it is run as [M, D] with D the product of
//     those axes, gamma and beta ([D] once flattened) being oneDNN's scale
//     and shift.
//   * The statistics (mean and biased variance) are computed here, in two
//     passes: per channel in double (BatchNorm), per row in float32 on the
//     values shifted by the row's first one (LayerNorm). oneDNN 3.2 sums
//     the raw values in float32, which loses ~4e-3 of the normalized value
//     once |mean| is 1e4 times the spread. The forward primitives then run with
//     use_global_stats (normalize with given statistics): BatchNorm in
//     training mode passes the batch statistics it writes to batch_mean /
//     batch_var, in inference mode running_mean / running_var (copied to
//     those outputs).
//   * The gradient ops recompute the statistics from x (the core's rules
//     never read forward outputs) and run the backward primitive, which
//     gives dx, dgamma (diff_scale) and dbeta (diff_shift); in training
//     mode it differentiates through the statistics, in inference mode
//     (use_global_stats) it treats them as constants. BatchNormGrad in
//     training mode then adds the gradients of its statistics outputs,
//     dx += (dmean + 2 dvar (x - mean)) / (N * S), when they are non-zero.
// Empty x is declined (cpu_eigen defines the NaN statistics of an empty
// batch). bfloat16 is not registered: oneDNN wants float32 scale and shift,
// and the core's schemas give gamma x's dtype.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>

namespace mkldnn_plugin {
namespace {

using dnnl::normalization_flags;
const normalization_flags kAffine =
    normalization_flags::use_scale | normalization_flags::use_shift;

// A float32 vector tensor (gamma, statistics) as a [n] memory.
dnnl::memory Vec(const dg::TensorRef& t, int64_t n) {
  return Memory(Plain({n}, dnnl::memory::data_type::f32), t);
}

// ------------------------------------------------------------ statistics

// Below this many elements the statistics run on one thread.
constexpr int64_t kParallelMin = 1 << 15;

// Mean and biased variance of each column j of x [n, g] (BatchNorm's
// channels): two passes accumulated in double, row by row (the inner loop
// runs along j and vectorizes).
void ColumnStats(const float* x, int64_t n, int64_t g, float* mean,
                 float* var) {
  std::vector<double> sum(g, 0.0), sq(g, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * g;
    for (int64_t j = 0; j < g; ++j) sum[j] += row[j];
  }
  for (int64_t j = 0; j < g; ++j) sum[j] /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * g;
    for (int64_t j = 0; j < g; ++j) {
      const double d = row[j] - sum[j];
      sq[j] += d * d;
    }
  }
  for (int64_t j = 0; j < g; ++j) {
    mean[j] = static_cast<float>(sum[j]);
    var[j] = static_cast<float>(sq[j] / static_cast<double>(n));
  }
}

// sum_t f(p[t]) in float with 16 running sums (independent chains the
// compiler keeps in vector registers), combined pairwise.
template <typename F>
float Accumulate(const float* p, int64_t len, F f) {
  float acc[16] = {};
  int64_t t = 0;
  for (; t + 16 <= len; t += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += f(p[t + k]);
  }
  float rest = 0.f;
  for (; t < len; ++t) rest += f(p[t]);
  for (int w = 8; w > 0; w /= 2) {
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  }
  return acc[0] + rest;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define DG_MKLDNN_AVX512 __attribute__((target("avx512f")))

// Lane 0 of Accumulate's pairwise combination of the 16 lanes of v (lane
// k += lane k + w for w = 8, 4, 2, 1): a lane's sums are the same float
// additions as the scalar loop's.
DG_MKLDNN_AVX512 inline float FoldLanes(__m512 v) {
  for (int w = 8; w > 0; w /= 2) {
    const __m512i idx = _mm512_and_si512(
        _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                          5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(w)),
        _mm512_set1_epi32(15));
    // (The masked form: GCC 12 flags the unmasked one's undefined
    // pass-through as uninitialised.)
    v = _mm512_add_ps(v, _mm512_maskz_permutexvar_ps(0xFFFF, idx, v));
  }
  return _mm512_cvtss_f32(v);
}

// RowStats' statistics of kR rows (row i at x + i * d, d >= 16) with
// AVX-512: each of Accumulate's 16 running sums is one lane, every lane
// adds the same values in the same order as the scalar loop (and no
// product is fused into its sum), so the results are its bits. The rows
// go in lock step: one 256-value row is 16 dependent vector adds per pass,
// and several rows' chains overlap.
template <int kR>
DG_MKLDNN_AVX512 void RowStatsGroup(const float* x, int64_t d, float inv_d,
                                    float* mean, float* var) {
  const int64_t full = d / 16 * 16;
  float x0[kR], shift[kR];
  __m512 acc[kR], vx0[kR], vshift[kR];
  for (int i = 0; i < kR; ++i) {
    x0[i] = x[i * d];
    vx0[i] = _mm512_set1_ps(x0[i]);
    acc[i] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < full; t += 16) {
    for (int i = 0; i < kR; ++i) {
      acc[i] = _mm512_add_ps(
          acc[i], _mm512_sub_ps(_mm512_loadu_ps(x + i * d + t), vx0[i]));
    }
  }
  for (int i = 0; i < kR; ++i) {
    float rest = 0.f;
    for (int64_t t = full; t < d; ++t) rest += x[i * d + t] - x0[i];
    shift[i] = (FoldLanes(acc[i]) + rest) * inv_d;
    vshift[i] = _mm512_set1_ps(shift[i]);
    acc[i] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < full; t += 16) {
    for (int i = 0; i < kR; ++i) {
      const __m512 e = _mm512_sub_ps(
          _mm512_sub_ps(_mm512_loadu_ps(x + i * d + t), vx0[i]), vshift[i]);
      acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(e, e));
    }
  }
  for (int i = 0; i < kR; ++i) {
    float rest = 0.f;
    for (int64_t t = full; t < d; ++t) {
      const float e = (x[i * d + t] - x0[i]) - shift[i];
      rest += e * e;
    }
    mean[i] = x0[i] + shift[i];
    var[i] = (FoldLanes(acc[i]) + rest) * inv_d;
  }
}

// Rows [r0, r1) of RowStats with AVX-512, four at a time.
DG_MKLDNN_AVX512 void RowStatsAvx512(const float* x, int64_t r0, int64_t r1,
                                     int64_t d, float inv_d, float* mean,
                                     float* var) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    RowStatsGroup<4>(x + r * d, d, inv_d, mean + r, var + r);
  }
  for (; r < r1; ++r) RowStatsGroup<1>(x + r * d, d, inv_d, mean + r, var + r);
}

// Whether RowStats takes the AVX-512 path (the same bits as the scalar
// one; DRAGON_MKLDNN_STATS_AVX512=0 switches it off, for tests).
bool RowStatsUseAvx512() {
  static const bool use = [] {
    const char* env = std::getenv("DRAGON_MKLDNN_STATS_AVX512");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return use;
}
#endif

// Mean and biased variance of each row of x [m, d] (LayerNorm's groups):
// two passes of float sums of the values shifted by the row's first
// element, so a large common offset does not swamp the spread (v - x0 is
// exact for v within a factor 2 of x0, and the sums stay of the order of
// the spread). On a CPU with AVX-512, rows of at least 16 values take
// RowStatsAvx512: the same sums, in vector registers, four rows at once.
void RowStats(const float* x, int64_t m, int64_t d, float* mean, float* var) {
  const float inv_d = 1.f / static_cast<float>(d);
#if defined(__x86_64__) && defined(__GNUC__)
  if (d >= 16 && RowStatsUseAvx512()) {
    // Chunks of 4-row groups, one per thread.
    const int64_t groups = (m + 3) / 4;
#pragma omp parallel if (m * d >= kParallelMin)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
      RowStatsAvx512(x, std::min(m, 4 * g0), std::min(m, 4 * g1), d, inv_d,
                     mean, var);
    }
    return;
  }
#endif
#pragma omp parallel for schedule(static) if (m * d >= kParallelMin)
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * d;
    const float x0 = row[0];
    const float shift =
        Accumulate(row, d, [x0](float v) { return v - x0; }) * inv_d;
    const float sq = Accumulate(row, d, [x0, shift](float v) {
      const float e = (v - x0) - shift;
      return e * e;
    });
    mean[r] = x0 + shift;
    var[r] = sq * inv_d;
  }
}

// ------------------------------------------------------------ BatchNorm

// x [N, C, *] with S = prod(x.shape[2:]); served when S == 1, as [N, C].
// The statistics and parameters are [C].
struct BnPlan {
  int64_t n, c, s;
  float eps;
  bool training;
  dnnl::memory::desc data;
  std::string key;
};

BnPlan PlanBatchNorm(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  DG_CHECK(x.ndim() >= 2, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": x must have rank >= 2");
  BnPlan p;
  p.n = x.dim(0);
  p.c = x.dim(1);
  p.s = p.n * p.c != 0 ? x.numel() / (p.n * p.c) : 0;
  p.eps = static_cast<float>(ctx.f("eps"));
  p.training = ctx.b("training");
  p.data = Plain({p.n, p.c}, dnnl::memory::data_type::f32);
  p.key = Key("bnorm", p.n, p.c, p.s, FloatBits(p.eps));
  return p;
}

// The forward normalizes with given statistics; the backward
// differentiates through them in training mode only.
normalization_flags Flags(bool given_stats) {
  return given_stats ? kAffine | normalization_flags::use_global_stats
                     : kAffine;
}

// Throws for a BatchNorm call with spatial axes: supports() then declines
// it, and a kernel never runs it.
void RequireFlat(const BnPlan& p) {
  DG_CHECK(p.s == 1, DG_UNIMPLEMENTED, "BatchNorm: spatial axes (oneDNN's "
           "plain-layout batch norm is not JIT-compiled)");
}

auto BnForward(const BnPlan& p, dnnl::prop_kind prop, bool given_stats) {
  return Cached<dnnl::batch_normalization_forward>(
      Key(p.key, "fwd", static_cast<int>(prop), given_stats), [&] {
        return dnnl::batch_normalization_forward::primitive_desc(
            Engine(), prop, p.data, p.data, p.eps, Flags(given_stats),
            Attr());
      });
}

auto BnBackward(const BnPlan& p) {
  return Cached<dnnl::batch_normalization_backward>(
      Key(p.key, "bwd", p.training), [&] {
        auto hint =
            BnForward(p, dnnl::prop_kind::forward_training, !p.training);
        return dnnl::batch_normalization_backward::primitive_desc(
            Engine(), dnnl::prop_kind::backward, p.data, p.data, p.data,
            p.eps, Flags(!p.training), *hint.pd, Attr());
      });
}

// The statistics a BatchNorm call normalizes with, written to mean / var:
// the batch's (training) or the running ones (inputs rm, rv).
void BnStats(const BnPlan& p, const dg::TensorRef& x, const dg::TensorRef& rm,
             const dg::TensorRef& rv, float* mean, float* var) {
  if (p.training) {
    ColumnStats(x.data<const float>(), p.n, p.c, mean, var);
  } else {
    std::memcpy(mean, rm.raw_data(), p.c * sizeof(float));
    std::memcpy(var, rv.raw_data(), p.c * sizeof(float));
  }
}

// Inputs: x, gamma, beta, running_mean, running_var.
// Outputs: y, batch_mean, batch_var.
void BatchNormK(dg::KernelContext& ctx) {
  const BnPlan p = PlanBatchNorm(ctx);
  RequireFlat(p);
  const dg::TensorRef mean = ctx.output(1), var = ctx.output(2);
  BnStats(p, ctx.input(0), ctx.input(3), ctx.input(4), mean.data<float>(),
          var.data<float>());
  auto fwd = BnForward(p, dnnl::prop_kind::forward_inference, true);
  Execute(ctx, fwd.prim, *fwd.pd,
          {{DNNL_ARG_SRC, Memory(p.data, ctx.input(0))},
           {DNNL_ARG_DST, Memory(p.data, ctx.output(0))},
           {DNNL_ARG_SCALE, Vec(ctx.input(1), p.c)},
           {DNNL_ARG_SHIFT, Vec(ctx.input(2), p.c)},
           {DNNL_ARG_MEAN, Vec(mean, p.c)},
           {DNNL_ARG_VARIANCE, Vec(var, p.c)}});
}

// dx += (dmean + 2 dvar (x - mean)) / (N S), per channel; skipped when
// dmean and dvar are all zero (their usual value: the statistics outputs
// are rarely used).
void AddStatGrads(const BnPlan& p, const float* x, const float* mean,
                  const float* dmean, const float* dvar, float* dx) {
  bool any = false;
  for (int64_t c = 0; c < p.c; ++c) any |= dmean[c] != 0.f || dvar[c] != 0.f;
  if (!any) return;
  const float inv_m = 1.f / static_cast<float>(p.n * p.s);
#pragma omp parallel for schedule(static) if (p.n * p.c * p.s >= kParallelMin)
  for (int64_t r = 0; r < p.n * p.c; ++r) {
    const int64_t c = r % p.c, at = r * p.s;
    const float a = dmean[c] * inv_m, b = 2.f * dvar[c] * inv_m;
    for (int64_t t = 0; t < p.s; ++t) {
      dx[at + t] += a + b * (x[at + t] - mean[c]);
    }
  }
}

// Inputs: x, gamma, running_mean, running_var, dy, dmean, dvar.
// Outputs: dx, dgamma, dbeta.
void BatchNormGradK(dg::KernelContext& ctx) {
  const BnPlan p = PlanBatchNorm(ctx);
  RequireFlat(p);
  const dg::TensorRef x = ctx.input(0), dx = ctx.output(0);
  float* stats = ctx.workspace<float>(2 * p.c);
  BnStats(p, x, ctx.input(2), ctx.input(3), stats, stats + p.c);
  const dnnl::memory::desc stat = Plain({p.c}, dnnl::memory::data_type::f32);
  auto bwd = BnBackward(p);
  Execute(ctx, bwd.prim, *bwd.pd,
          {{DNNL_ARG_SRC, Memory(p.data, x)},
           {DNNL_ARG_MEAN, dnnl::memory(stat, Engine(), stats)},
           {DNNL_ARG_VARIANCE, dnnl::memory(stat, Engine(), stats + p.c)},
           {DNNL_ARG_DIFF_DST, Memory(p.data, ctx.input(4))},
           {DNNL_ARG_SCALE, Vec(ctx.input(1), p.c)},
           {DNNL_ARG_DIFF_SRC, Memory(p.data, dx)},
           {DNNL_ARG_DIFF_SCALE, Vec(ctx.output(1), p.c)},
           {DNNL_ARG_DIFF_SHIFT, Vec(ctx.output(2), p.c)}});
  if (p.training) {
    AddStatGrads(p, x.data<const float>(), stats,
                 ctx.input(5).data<const float>(),
                 ctx.input(6).data<const float>(), dx.data<float>());
  }
}

// ------------------------------------------------------------ LayerNorm

// x as [M, D] with D = prod(x.shape[axis:]); statistics [M], params [D].
struct LnPlan {
  int64_t m, d;
  float eps;
  dnnl::memory::desc data, stat;
  std::string key;
};

LnPlan PlanLayerNorm(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const int32_t rank = x.ndim();
  int64_t axis = ctx.i("axis");
  if (axis < 0) axis += rank;
  DG_CHECK(axis >= 0 && axis < rank, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": axis ", ctx.i("axis"), " out of range for rank ", rank);
  LnPlan p;
  p.m = 1;
  for (int32_t i = 0; i < axis; ++i) p.m *= x.dim(i);
  p.d = p.m != 0 ? x.numel() / p.m : 0;
  p.eps = static_cast<float>(ctx.f("eps"));
  p.data = Plain({p.m, p.d}, dnnl::memory::data_type::f32);
  p.stat = Plain({p.m}, dnnl::memory::data_type::f32);
  p.key = Key("lnorm", p.m, p.d, FloatBits(p.eps));
  return p;
}

auto LnForward(const LnPlan& p, dnnl::prop_kind prop, bool given_stats) {
  return Cached<dnnl::layer_normalization_forward>(
      Key(p.key, "fwd", static_cast<int>(prop), given_stats), [&] {
        return dnnl::layer_normalization_forward::primitive_desc(
            Engine(), prop, p.data, p.data, p.stat, p.eps, Flags(given_stats),
            Attr());
      });
}

auto LnBackward(const LnPlan& p) {
  return Cached<dnnl::layer_normalization_backward>(Key(p.key, "bwd"), [&] {
    auto hint = LnForward(p, dnnl::prop_kind::forward_training, false);
    return dnnl::layer_normalization_backward::primitive_desc(
        Engine(), dnnl::prop_kind::backward, p.data, p.data, p.data, p.stat,
        p.eps, kAffine, *hint.pd, Attr());
  });
}

// The per-row statistics of x in workspace memories {mean, var}.
std::pair<dnnl::memory, dnnl::memory> LnStats(const dg::KernelContext& ctx,
                                              const LnPlan& p) {
  float* stats = ctx.workspace<float>(2 * p.m);
  RowStats(ctx.input(0).data<const float>(), p.m, p.d, stats, stats + p.m);
  return {dnnl::memory(p.stat, Engine(), stats),
          dnnl::memory(p.stat, Engine(), stats + p.m)};
}

// Inputs: x, gamma, beta. Output: y.
void LayerNormK(dg::KernelContext& ctx) {
  const LnPlan p = PlanLayerNorm(ctx);
  const auto [mean, var] = LnStats(ctx, p);
  auto fwd = LnForward(p, dnnl::prop_kind::forward_inference, true);
  Execute(ctx, fwd.prim, *fwd.pd,
          {{DNNL_ARG_SRC, Memory(p.data, ctx.input(0))},
           {DNNL_ARG_DST, Memory(p.data, ctx.output(0))},
           {DNNL_ARG_SCALE, Vec(ctx.input(1), p.d)},
           {DNNL_ARG_SHIFT, Vec(ctx.input(2), p.d)},
           {DNNL_ARG_MEAN, mean},
           {DNNL_ARG_VARIANCE, var}});
}

// Inputs: x, gamma, dy. Outputs: dx, dgamma, dbeta.
void LayerNormGradK(dg::KernelContext& ctx) {
  const LnPlan p = PlanLayerNorm(ctx);
  const auto [mean, var] = LnStats(ctx, p);
  auto bwd = LnBackward(p);
  // oneDNN's layer-norm backward takes a shift whose values it never
  // reads (its batch-norm backward does not); gamma's buffer stands in.
  Execute(ctx, bwd.prim, *bwd.pd,
          {{DNNL_ARG_SRC, Memory(p.data, ctx.input(0))},
           {DNNL_ARG_MEAN, mean},
           {DNNL_ARG_VARIANCE, var},
           {DNNL_ARG_DIFF_DST, Memory(p.data, ctx.input(2))},
           {DNNL_ARG_SCALE, Vec(ctx.input(1), p.d)},
           {DNNL_ARG_SHIFT, Vec(ctx.input(1), p.d)},
           {DNNL_ARG_DIFF_SRC, Memory(p.data, ctx.output(0))},
           {DNNL_ARG_DIFF_SCALE, Vec(ctx.output(1), p.d)},
           {DNNL_ARG_DIFF_SHIFT, Vec(ctx.output(2), p.d)}});
}

// ------------------------------------------------------------ registration

// supports(): x is not empty and oneDNN builds the primitives of the call.
// Never throws.
template <typename Plan, Plan (*MakePlan)(const dg::KernelContext&),
          typename Build>
int32_t Builds(const DgCallFrame* f, Build build) {
  try {
    const dg::KernelContext ctx(f);
    if (ctx.input(0).numel() == 0) return 0;
    build(MakePlan(ctx));
    return 1;
  } catch (...) {
    return 0;
  }
}

int32_t BatchNormSupports(const DgCallFrame* f) {
  return Builds<BnPlan, PlanBatchNorm>(f, [](const BnPlan& p) {
    RequireFlat(p);
    BnForward(p, dnnl::prop_kind::forward_inference, true);
  });
}

int32_t BatchNormGradSupports(const DgCallFrame* f) {
  return Builds<BnPlan, PlanBatchNorm>(f, [](const BnPlan& p) {
    RequireFlat(p);
    BnBackward(p);
  });
}

int32_t LayerNormSupports(const DgCallFrame* f) {
  return Builds<LnPlan, PlanLayerNorm>(f, [](const LnPlan& p) {
    LnForward(p, dnnl::prop_kind::forward_inference, true);
  });
}

int32_t LayerNormGradSupports(const DgCallFrame* f) {
  return Builds<LnPlan, PlanLayerNorm>(f,
                                       [](const LnPlan& p) { LnBackward(p); });
}

int Register(const char* op, const char* name, dg::KernelFunc fn,
             DgSupportsFn supports) {
  return dg::internal::AddKernel(op, "cpu", kF32, kPriority, 0, name, fn,
                                 supports);
}

[[maybe_unused]] const int kRegistered[] = {
    Register("BatchNorm", "mkldnn::BatchNorm", &BatchNormK,
             &BatchNormSupports),
    Register("BatchNormGrad", "mkldnn::BatchNormGrad", &BatchNormGradK,
             &BatchNormGradSupports),
    Register("LayerNorm", "mkldnn::LayerNorm", &LayerNormK,
             &LayerNormSupports),
    Register("LayerNormGrad", "mkldnn::LayerNormGrad", &LayerNormGradK,
             &LayerNormGradSupports),
};

}  // namespace
}  // namespace mkldnn_plugin
