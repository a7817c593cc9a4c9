// BiasGelu and BiasGeluGrad (dragon_core/src/ops/fused_act.cc): the GELU
// block of a Linear layer in one pass each, for the `gelu_fusion` graph
// pass (issue 21: Add -> Gelu -> Cast and GeluGrad -> Sum & Cast of the
// bfloat16 encoder step were ~900 us of memory-bound work on 4 MiB float32
// tensors written and read again).
//
// Same bits as the unfused ops, by running their code on the same values:
//   * x + bias: one float32 add per element, as Add;
//   * gelu / gelu': the float32 runs of Gelu and GeluGrad
//     (elementwise::FloatKernelsFor<float>().unary / .gelu_grad, built per
//     instruction set in elementwise_isa.cc, gelu_grad.h): every element
//     takes their packet path, so a result does not depend on its position
//     in the run;
//   * the cast: FloatToBfloat16 (cast.h, Cast's conversion) or Eigen's
//     float -> half, once per element;
//   * dbias: Sum's fold of a bias gradient (reduce.cc, RunOuter): the rows
//     split into the same chunks (a function of the shape only), each chunk
//     folded by the row kernels' column_sum (rows.h: four float rows added
//     in float, then into double accumulators), the chunks' partial sums
//     added in chunk order in double and rounded once to float. The
//     chunking is copied from reduce.cc (kTargetItems, kMinChunk,
//     kMaxBlock below); tests/ops/test_fused_act.py checks the bits against
//     the unfused Sum, so a change there shows.
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
#include "rows.h"

namespace cpu_eigen {
namespace {

// reduce.cc's chunking of a reduction over leading axes that keeps the last
// (Fold::RunOuter with one group): mirrored so that dbias has Sum's bits.
constexpr int64_t kSumTargetItems = 32;
constexpr int64_t kSumMinChunk = 16384;
constexpr int64_t kSumMaxBlock = 4096;

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

// out[r, :] = x[r, :] + bias for rows [0, rows) of [rows, cols] matrices:
// one float32 add per element, as Add. A loop over restrict pointers, also
// built for AVX-512 (chosen at run time, as cast.cc's conversions): it runs
// in cache, right before the gelu that reads it, and at the baseline's four
// lanes it cost a fifth of the fused backward.
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

void CheckShapes(const dg::KernelContext& ctx, int num_inputs) {
  const dg::TensorRef x = ctx.input(0), b = ctx.input(1);
  DG_CHECK(x.ndim() >= 1 && b.ndim() == 1 && b.dim(0) == x.dim(x.ndim() - 1),
           DG_INTERNAL, ctx.op_name(), ": bias of ", b.numel(),
           " elements does not run along x's last axis");
  for (int i = 2; i < num_inputs; ++i) {
    DG_CHECK(ctx.input(i).numel() == x.numel(), DG_INTERNAL, ctx.op_name(),
             ": input ", i, " has ", ctx.input(i).numel(), " elements, x ",
             x.numel());
  }
  DG_CHECK(ctx.output(0).numel() == x.numel(), DG_INTERNAL, ctx.op_name(),
           ": output has ", ctx.output(0).numel(), " elements, x ", x.numel());
}

// y = gelu(x + bias) in y's dtype.
template <typename T>
void BiasGelu(dg::KernelContext& ctx) {
  static_assert(std::is_same_v<T, float>, "float32 inputs only");
  const bool tanh = TanhMode(ctx);
  CheckShapes(ctx, 2);
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t cols = x.dim(x.ndim() - 1), rows = n / cols;
  const float* px = static_cast<const float*>(x.raw_data());
  const float* pb = static_cast<const float*>(ctx.input(1).raw_data());
  void* py = y.raw_data();
  const DgDType dtype = y.dtype();
  const auto unary = elementwise::FloatKernelsFor<float>().unary;
  const UnaryKind kind = tanh ? UnaryKind::kGeluTanh : UnaryKind::kGeluErf;
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        // Rows in groups of about kBlockFloats elements (one row at least).
        const int64_t group = std::max<int64_t>(1, kBlockFloats / cols);
        std::vector<float> buf(dtype == DG_FLOAT32 ? 0 : group * cols);
        for (int64_t r = begin; r < end; r += group) {
          const int64_t m = std::min(group, end - r);
          float* f = dtype == DG_FLOAT32 ? static_cast<float*>(py) + r * cols
                                         : buf.data();
          AddBias(px + r * cols, pb, f, m, cols);
          unary(kind, UnaryParams<float>{}, f, f, m * cols);  // in place
          if (dtype != DG_FLOAT32) Store(f, py, dtype, r * cols, m * cols);
        }
      },
      cols * elementwise::kCostTranscendental);
}
DG_KERNEL("BiasGelu", "cpu", BiasGelu, float);

// g = dy * gelu'(x + bias); dx = g in dx's dtype; dbias = sum of g's rows.
template <typename T>
void BiasGeluGrad(dg::KernelContext& ctx) {
  static_assert(std::is_same_v<T, float>, "float32 inputs only");
  const bool tanh = TanhMode(ctx);
  CheckShapes(ctx, 3);
  const dg::TensorRef x = ctx.input(0), dx = ctx.output(0), db = ctx.output(1);
  const int64_t n = x.numel();
  const int64_t cols = x.dim(x.ndim() - 1);
  DG_CHECK(db.numel() == cols, DG_INTERNAL, ctx.op_name(), ": dbias has ",
           db.numel(), " elements, not ", cols);
  float* pdb = static_cast<float*>(db.raw_data());
  if (cols == 0) return;
  if (n == 0) {  // no rows: the bias gradient is an empty sum
    std::fill(pdb, pdb + cols, 0.0f);
    return;
  }
  const int64_t rows = n / cols;
  const float* px = static_cast<const float*>(x.raw_data());
  const float* pb = static_cast<const float*>(ctx.input(1).raw_data());
  const float* pdy = static_cast<const float*>(ctx.input(2).raw_data());
  void* pdx = dx.raw_data();
  const DgDType dtype = dx.dtype();
  const auto grad = elementwise::FloatKernelsFor<float>().gelu_grad;
  const auto column_sum = RowKernelsFor<float>().column_sum;
  const int64_t chunks = SumChunks(rows, cols);
  double* partial = ctx.workspace<double>(static_cast<size_t>(chunks * cols));
  // Rows go through the column sum four at a time (its float grouping), so
  // a float32 copy of four rows is enough for 16-bit outputs.
  constexpr int64_t kGroup = 4;
  ParallelFor(
      chunks,
      [&](int64_t begin, int64_t end) {
        std::vector<float> pre(kGroup * cols);
        std::vector<float> buf(dtype == DG_FLOAT32 ? 0 : kGroup * cols);
        for (int64_t c = begin; c < end; ++c) {
          const int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
          double* acc = partial + c * cols;
          std::fill(acc, acc + cols, 0.0);
          for (int64_t r = r0; r < r1; r += kGroup) {
            const int64_t m = std::min(kGroup, r1 - r);
            float* g = dtype == DG_FLOAT32 ? static_cast<float*>(pdx) + r * cols
                                           : buf.data();
            AddBias(px + r * cols, pb, pre.data(), m, cols);
            grad(tanh, pre.data(), pdy + r * cols, g, m * cols);
            if (dtype != DG_FLOAT32) Store(g, pdx, dtype, r * cols, m * cols);
            column_sum(g, cols, m, cols, acc);
          }
        }
      },
      (rows / chunks + 1) * cols * elementwise::kCostHeavy);
  for (int64_t k = 0; k < cols; ++k) {
    double s = partial[k];
    for (int64_t c = 1; c < chunks; ++c) s += partial[c * cols + k];
    pdb[k] = static_cast<float>(s);
  }
}
DG_KERNEL("BiasGeluGrad", "cpu", BiasGeluGrad, float);

}  // namespace
}  // namespace cpu_eigen
