// BiasGelu and BiasGeluGrad (dragon_core/src/ops/fused_act.cc): the GELU
// block of a Linear layer in one pass each, for the `gelu_fusion` graph
// pass (issue 21: Add -> Gelu -> Cast and GeluGrad -> Sum & Cast of the
// bfloat16 encoder step were ~900 us of memory-bound work on 4 MiB float32
// tensors written and read again).
//
// Same bits as the unfused ops, by running their code on the same values:
//   * pre = x + bias: one float32 add per element, as Add;
//   * gelu / gelu': the float32 packet math of Gelu and GeluGrad
//     (gelu::ErfCore, elementwise_ops.h; built per instruction set in
//     elementwise_isa.cc and reached through
//     elementwise::FloatKernelsFor<float>()). The exact form runs one pass
//     per row: .bias_gelu adds the bias inside the gelu's packet loop and
//     stores pre beside y; .gelu_slope_rows computes four rows' gelu' and
//     their column sum's float fold together (16-bit dx: the four rows go
//     to a float buffer, then are rounded). Rows narrower than
//     kOnePassCols, the tanh form, and a float32 dx take the two-pass route
//     (AddBias then .unary; .gelu_grad then column_sum) over a group of
//     rows: with dx in float32 the one pass kept 12 streams of 4 MiB
//     tensors in flight per thread (four rows of pre, dy and dx), and in
//     the float32 encoder step took 435-475 us against 352 for .gelu_grad
//     over the four rows as one run and the sum from L1. Every
//     element takes the packet path either way, so a result does not depend
//     on its position or route;
//   * the cast: FloatToBfloat16 (cast.h, Cast's conversion) or Eigen's
//     float -> half, once per element;
//   * dbias: Sum's fold of a bias gradient (reduce.cc, RunOuter): the rows
//     split into the same chunks (a function of the shape only), each chunk
//     folded as the row kernels' column_sum folds it (rows.h: four float
//     rows added in float, then into double accumulators; .gelu_slope_rows
//     does the same for its four rows), the chunks' partial sums
//     added in chunk order in double and rounded once to float. The
//     chunking constants are Sum's own (reduce_util.h, fold_split);
//     tests/ops/test_fused_act.py checks the bits against the unfused Sum.
// The pre-activation is written by the forward and read by the backward (as
// the Add's output was): recomputing it in the backward from x and bias
// saved that 4 MiB write but cost more than it (a separate, memory-bound
// pass over x in front of the compute-bound gelu', measured ~+150 us a
// 1024 x 1024 block on one core; docs/benchmarks.md).
// Work runs over rows; results do not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cast.h"
#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "reduce_util.h"
#include "rows.h"

namespace cpu_eigen {
namespace {

// reduce.cc's chunking of a reduction over leading axes that keeps the last
// (Fold::RunOuter with one group): mirrored so that dbias has Sum's bits.
constexpr int64_t kSumTargetItems = fold_split::kTargetItems;
constexpr int64_t kSumMinChunk = fold_split::kMinChunk;
constexpr int64_t kSumMaxBlock = fold_split::kMaxBlock;

// The forward works on groups of rows of about this many elements (in L1).
constexpr int64_t kBlockFloats = 4096;

int64_t SumChunks(int64_t rows, int64_t width) {
  const int64_t blocks = (width + kSumMaxBlock - 1) / kSumMaxBlock;
  int64_t chunks = 1;
  if (blocks < kSumTargetItems) {
    chunks = std::min(kSumTargetItems / blocks,
                      rows * width / (blocks * kSumMinChunk));
    chunks = std::max<int64_t>(1, std::min(chunks, rows));
  }
  return chunks;
}

// Rows at least this wide take the one-pass kernels of the exact form:
// a row's last columns (cols not a multiple of the packet) go through a
// padded packet of their own, which for narrow rows would be most of the
// work; the two-pass route pads once per group of rows.
constexpr int64_t kOnePassCols = 256;

// out[r, :] = x[r, :] + bias for rows [0, rows) of [rows, cols] matrices:
// one float32 add per element, as Add (no contraction is possible: the same
// bits in every build), for the two-pass route (the tanh form, narrow
// rows). A loop over restrict pointers, also built for AVX-512 and chosen
// at run time as cast.cc's conversions are (DRAGON_CPU_EIGEN_ISA caps it):
// at the baseline's four lanes the add was a measurable part of the fused
// op, beside the gelu that reads its rows back from the cache.
void AddBiasBase(const float* __restrict x, const float* __restrict bias,
                 float* __restrict out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      out[r * cols + j] = x[r * cols + j] + bias[j];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi2")))
void AddBiasV4(const float* __restrict x, const float* __restrict bias,
               float* __restrict out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      out[r * cols + j] = x[r * cols + j] + bias[j];
    }
  }
}
#endif

void AddBias(const float* x, const float* bias, float* out, int64_t rows,
             int64_t cols) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool v4 = DetectIsaLevel() >= 4;
  if (v4) {
    AddBiasV4(x, bias, out, rows, cols);
    return;
  }
#endif
  AddBiasBase(x, bias, out, rows, cols);
}

bool TanhMode(const dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           ctx.op_name(), ": approximate must be \"none\" or \"tanh\", got \"",
           mode, "\"");
  return mode == "tanh";
}

// out[0, n) = f[0, n) in the output's dtype (float32 copies).
void Store(const float* f, void* out, DgDType dtype, int64_t offset,
           int64_t n) {
  if (dtype == DG_BFLOAT16) {
    FloatToBfloat16(f, static_cast<Eigen::bfloat16*>(out) + offset, n);
  } else if (dtype == DG_FLOAT16) {
    Eigen::half* h = static_cast<Eigen::half*>(out) + offset;
    for (int64_t j = 0; j < n; ++j) h[j] = static_cast<Eigen::half>(f[j]);
  } else {
    std::copy(f, f + n, static_cast<float*>(out) + offset);
  }
}

// y = gelu(x + bias) in y's dtype, and pre = x + bias (float32, for the
// backward: BiasGeluGrad reads it as GeluGrad read the Add's output).
template <typename T>
void BiasGelu(dg::KernelContext& ctx) {
  static_assert(std::is_same_v<T, float>, "float32 inputs only");
  const bool tanh = TanhMode(ctx);
  const dg::TensorRef x = ctx.input(0), b = ctx.input(1);
  const dg::TensorRef y = ctx.output(0), pre = ctx.output(1);
  const int64_t n = x.numel();
  DG_CHECK(x.ndim() >= 1 && b.ndim() == 1 && b.dim(0) == x.dim(x.ndim() - 1) &&
               y.numel() == n && pre.numel() == n,
           DG_INTERNAL, ctx.op_name(), ": x of ", n, " elements, bias ",
           b.numel(), ", y ", y.numel(), ", pre ", pre.numel());
  if (n == 0) return;
  const int64_t cols = x.dim(x.ndim() - 1), rows = n / cols;
  const float* px = static_cast<const float*>(x.raw_data());
  const float* pb = static_cast<const float*>(b.raw_data());
  float* ppre = static_cast<float*>(pre.raw_data());
  void* py = y.raw_data();
  const DgDType dtype = y.dtype();
  const auto& kernels = elementwise::FloatKernelsFor<float>();
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        // Rows in groups of about kBlockFloats elements (one row at least).
        // The exact form adds the bias inside the gelu's packet loop (one
        // pass: the loads of x overlap the arithmetic); the tanh form
        // writes pre, then reads it back from the cache.
        const int64_t group = std::max<int64_t>(1, kBlockFloats / cols);
        std::vector<float> buf(dtype == DG_FLOAT32 ? 0 : group * cols);
        for (int64_t r = begin; r < end; r += group) {
          const int64_t m = std::min(group, end - r);
          float* p = ppre + r * cols;
          float* f = dtype == DG_FLOAT32 ? static_cast<float*>(py) + r * cols
                                         : buf.data();
          if (tanh || cols < kOnePassCols) {
            AddBias(px + r * cols, pb, p, m, cols);
            kernels.unary(tanh ? UnaryKind::kGeluTanh : UnaryKind::kGeluErf,
                          UnaryParams<float>{}, p, f, m * cols);
          } else {
            for (int64_t i = 0; i < m; ++i) {
              kernels.bias_gelu(px + (r + i) * cols, pb, p + i * cols,
                                f + i * cols, cols);
            }
          }
          if (dtype != DG_FLOAT32) Store(f, py, dtype, r * cols, m * cols);
        }
      },
      cols * elementwise::kCostTranscendental);
}
DG_KERNEL("BiasGelu", "cpu", BiasGelu, float);

// g = dy * gelu'(pre); dx = g in dx's dtype; dbias = the sum of g's rows.
template <typename T>
void BiasGeluGrad(dg::KernelContext& ctx) {
  static_assert(std::is_same_v<T, float>, "float32 inputs only");
  const bool tanh = TanhMode(ctx);
  const dg::TensorRef pre = ctx.input(0), dy = ctx.input(1);
  const dg::TensorRef dx = ctx.output(0), db = ctx.output(1);
  const int64_t n = pre.numel();
  const int64_t cols = pre.ndim() >= 1 ? pre.dim(pre.ndim() - 1) : 1;
  DG_CHECK(pre.ndim() >= 1 && dy.numel() == n && dx.numel() == n &&
               db.numel() == cols,
           DG_INTERNAL, ctx.op_name(), ": pre of ", n, " elements, dy ",
           dy.numel(), ", dx ", dx.numel(), ", dbias ", db.numel());
  float* pdb = static_cast<float*>(db.raw_data());
  if (cols == 0) return;
  if (n == 0) {  // no rows: the bias gradient is an empty sum
    std::fill(pdb, pdb + cols, 0.0f);
    return;
  }
  const int64_t rows = n / cols;
  const float* pp = static_cast<const float*>(pre.raw_data());
  const float* pdy = static_cast<const float*>(dy.raw_data());
  void* pdx = dx.raw_data();
  const DgDType dtype = dx.dtype();
  const auto& kernels = elementwise::FloatKernelsFor<float>();
  const auto column_sum = RowKernelsFor<float>().column_sum;
  const int64_t chunks = SumChunks(rows, cols);
  double* partial = ctx.workspace<double>(static_cast<size_t>(chunks * cols));
  // Rows go through the column sum four at a time (its float grouping), so
  // a float32 copy of four rows is enough for 16-bit outputs; and
  // .gelu_slope_rows folds exactly ColumnSum's groups of four.
  constexpr int64_t kGroup = 4;
  static_assert(kGroup == 4, "the column sum folds rows four at a time");
  ParallelFor(
      chunks,
      [&](int64_t begin, int64_t end) {
        std::vector<float> buf(dtype == DG_FLOAT32 ? 0 : kGroup * cols);
        for (int64_t c = begin; c < end; ++c) {
          const int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
          double* acc = partial + c * cols;
          std::fill(acc, acc + cols, 0.0);
          for (int64_t r = r0; r < r1; r += kGroup) {
            const int64_t m = std::min(kGroup, r1 - r);
            float* g = dtype == DG_FLOAT32 ? static_cast<float*>(pdx) + r * cols
                                           : buf.data();
            if (tanh || cols < kOnePassCols || dtype == DG_FLOAT32) {
              kernels.gelu_grad(tanh, pp + r * cols, pdy + r * cols, g,
                                m * cols);
              column_sum(g, cols, m, cols, acc);
            } else {
              // gelu' and the column sum in one pass over the rows.
              kernels.gelu_slope_rows(pp + r * cols, pdy + r * cols, g, cols,
                                      m, cols, acc);
            }
            if (dtype != DG_FLOAT32) Store(g, pdx, dtype, r * cols, m * cols);
          }
        }
      },
      (rows / chunks + 1) * cols * elementwise::kCostHeavy);
  // The chunks' sums in chunk order, a whole row of partials at a time (the
  // same additions per column as one chain down the column, vectorised).
  for (int64_t c = 1; c < chunks; ++c) {
    const double* src = partial + c * cols;
    for (int64_t k = 0; k < cols; ++k) partial[k] += src[k];
  }
  for (int64_t k = 0; k < cols; ++k) pdb[k] = static_cast<float>(partial[k]);
}
DG_KERNEL("BiasGeluGrad", "cpu", BiasGeluGrad, float);

}  // namespace
}  // namespace cpu_eigen
