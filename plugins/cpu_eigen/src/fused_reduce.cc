// SumCastGrad (dragon_core/src/ops/fused_reduce.cc): x read as the
// row-major [rows, width] matrix of `shape` split after `num_leading` axes;
// sum[k] = the float32 sum of column k, y = x cast to bfloat16 / float16.
//
// One pass over x: the row blocks that fold into the sums are converted
// while they are in cache. The sums are bit for bit those of the Sum
// kernel (reduce.cc) on a dense copy of x:
//  - width > 1 (Sum's RunOuter over a [rows, width] layout): the same split
//    into column blocks and row chunks (fold_split, reduce_util.h), each
//    chunk's rows added four at a time in float and widened into a double
//    per column by ColumnSum (rows.h, the build for this CPU, as Sum), the
//    chunks combined in order;
//  - width == 1 (Sum's RunInner over one contiguous run): SumFloatRun over
//    the same chunks, combined in order.
// The split depends on the shapes only, so the result does not depend on
// the thread count. The casts are Cast's conversions (cast.h): bit for bit.
//
// x arrives with its strides (DG_KERNEL_STRIDED_INPUTS). A transposed view
// whose rows are made of dense runs (the attention head merge: [B, S, H, D]
// read as [B*S, H*D] from a [B, H, S, D] product) is read in place, so the
// Reshape copy the graph had before the Sum and the Cast is gone; any other
// layout (runs shorter than 8, element strides) is first copied densely.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cast.h"
#include "common.h"
#include "reduce_util.h"
#include "rows.h"

namespace cpu_eigen {
namespace {

// x as [rows, width]: the row dims (outermost first, input strides) and
// the offsets, within a row, of its `run`-long dense segments.
struct RowRuns {
  std::vector<Dim> rows;
  std::vector<int64_t> seg;
  int64_t run = 0;
};

// Splits x's layout at `width` elements (row-major). False when a dim of
// x straddles the split, or a row's innermost dim is not dense or is
// shorter than 8 elements: then x is read through a dense copy.
bool SplitRuns(const std::vector<int64_t>& shape,
               const std::vector<int64_t>& strides, int64_t width,
               RowRuns* out) {
  std::vector<Dim> dims;  // extent-1 dims dropped, dense neighbours merged
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!dims.empty() && dims.back().stride == strides[i] * shape[i]) {
      dims.back() = Dim{dims.back().size * shape[i], strides[i]};
    } else {
      dims.push_back(Dim{shape[i], strides[i]});
    }
  }
  std::vector<Dim> cols;  // innermost first
  int64_t acc = 1;
  while (acc < width && !dims.empty()) {
    const Dim d = dims.back();
    dims.pop_back();
    if (width % acc != 0) return false;
    const int64_t need = width / acc;
    if (d.size <= need) {
      cols.push_back(d);
      acc *= d.size;
    } else {
      if (d.size % need != 0) return false;
      cols.push_back(Dim{need, d.stride});
      dims.push_back(Dim{d.size / need, d.stride * need});
      acc = width;
    }
  }
  if (acc != width || cols.empty() || cols[0].stride != 1 ||
      cols[0].size < 8) {
    return false;
  }
  out->rows = dims;
  out->run = cols[0].size;
  std::reverse(cols.begin(), cols.end());
  const size_t outer = cols.size() - 1;  // the dims above the dense run
  const int64_t nseg = width / out->run;
  out->seg.resize(nseg);
  Odometer at(cols, outer, 0);
  for (int64_t s = 0; s < nseg; ++s, at.Next()) out->seg[s] = at.offset();
  return true;
}

// n values of x to y, as Cast converts them.
template <typename Half>
void CastRun(const float* x, Half* y, int64_t n) {
  if constexpr (std::is_same_v<Half, Eigen::bfloat16>) {
    FloatToBfloat16(x, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = Convert<Half>(x[i]);
  }
}

// width > 1: columns [k0, k1) of rows [r0, r1) folded into dst[k0, k1)
// (zeroed first), the rows cast into y. Rows come in groups of four from
// r0, as ColumnSum (rows.h) takes them: runs of whole groups at one stride
// (within the innermost row dim) go through ColumnSum itself, the vector
// build Sum uses, kSub rows at a time, then are cast while in cache; a
// group straddling two lines of the innermost row dim is added here with
// ColumnSum's arithmetic ((p0 + p1) + (p2 + p3) in float, widened), and the
// last rows % 4 one by one, as ColumnSum's tail.
template <typename Half>
void FoldCastBlock(const float* x, const RowRuns& l, int64_t width,
                   int64_t k0, int64_t k1, int64_t r0, int64_t r1,
                   double* dst, Half* y) {
  constexpr int64_t kSub = 16;
  for (int64_t k = k0; k < k1; ++k) dst[k] = 0.0;
  const RowKernels<float>& kern = RowKernelsFor<float>();
  const int64_t run = l.run;
  const size_t nd = l.rows.size();
  const int64_t line = nd ? l.rows.back().size : 1;
  const int64_t step = nd ? l.rows.back().stride : 0;
  // Calls fn(lo, hi, in): columns [lo, hi) of the block, at offset `in`
  // from a row's start, one dense piece per segment.
  auto pieces = [&](auto fn) {
    for (int64_t s = k0 / run; s * run < k1; ++s) {
      const int64_t lo = std::max(k0, s * run);
      const int64_t hi = std::min(k1, (s + 1) * run);
      fn(lo, hi, l.seg[s] + (lo - s * run));
    }
  };
  int64_t r = r0;
  while (r < r1) {
    const int64_t base = OffsetOf(l.rows, nd, r);
    int64_t n = std::min({kSub, r1 - r, line - r % line});
    if (n >= 4) {
      n -= n % 4;
      pieces([&](int64_t lo, int64_t hi, int64_t in) {
        kern.column_sum(x + base + in, step, n, hi - lo, dst + lo);
      });
      for (int64_t i = 0; i < n; ++i) {
        pieces([&](int64_t lo, int64_t hi, int64_t in) {
          CastRun(x + base + i * step + in, y + (r + i) * width + lo, hi - lo);
        });
      }
      r += n;
    } else if (r + 4 <= r1) {
      int64_t off[4];
      for (int i = 0; i < 4; ++i) off[i] = OffsetOf(l.rows, nd, r + i);
      pieces([&](int64_t lo, int64_t hi, int64_t in) {
        const float* p0 = x + off[0] + in;
        const float* p1 = x + off[1] + in;
        const float* p2 = x + off[2] + in;
        const float* p3 = x + off[3] + in;
        for (int64_t j = 0; j < hi - lo; ++j) {
          dst[lo + j] +=
              static_cast<double>((p0[j] + p1[j]) + (p2[j] + p3[j]));
        }
        for (int i = 0; i < 4; ++i) {
          CastRun(x + off[i] + in, y + (r + i) * width + lo, hi - lo);
        }
      });
      r += 4;
    } else {
      pieces([&](int64_t lo, int64_t hi, int64_t in) {
        const float* p = x + base + in;
        for (int64_t j = 0; j < hi - lo; ++j) {
          dst[lo + j] += static_cast<double>(p[j]);
        }
        CastRun(p, y + r * width + lo, hi - lo);
      });
      r += 1;
    }
  }
}

// width > 1: Sum's RunOuter split (reduce.cc) of one group of `width`
// outputs, each block folding into its chunk's row of partial sums.
template <typename Half>
void SumCastColumns(const dg::KernelContext& ctx, const float* x,
                    const RowRuns& l, int64_t rows, int64_t width, float* sum,
                    Half* y) {
  using fold_split::kMaxBlock;
  using fold_split::kMinChunk;
  using fold_split::kTargetItems;
  const int64_t blocks = (width + kMaxBlock - 1) / kMaxBlock;
  int64_t chunks = 1;
  if (blocks < kTargetItems) {
    chunks = std::min(kTargetItems / blocks,
                      rows * width / (blocks * kMinChunk));
    chunks = std::max<int64_t>(1, std::min(chunks, rows));
  }
  double* part = ctx.workspace<double>(width * chunks);
  ParallelFor(
      blocks * chunks,
      [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t b = item / chunks, c = item % chunks;
          FoldCastBlock(x, l, width, width * b / blocks,
                        width * (b + 1) / blocks, rows * c / chunks,
                        rows * (c + 1) / chunks, part + c * width, y);
        }
      },
      rows * width / (blocks * chunks));
  // The chunks in order, a row of partials at a time (per column the same
  // additions as one chain down it, vectorised).
  ParallelFor(
      width,
      [&](int64_t begin, int64_t end) {
        for (int64_t c = 1; c < chunks; ++c) {
          const double* src = part + c * width;
          for (int64_t k = begin; k < end; ++k) part[k] = part[k] + src[k];
        }
        for (int64_t k = begin; k < end; ++k) sum[k] = static_cast<float>(part[k]);
      },
      chunks);
}

// width == 1 and rows > 1: Sum's RunInner over the dense run x[0, rows).
template <typename Half>
void SumCastRun(const float* x, int64_t rows, float* sum, Half* y) {
  using fold_split::kMinChunk;
  using fold_split::kTargetItems;
  const int64_t chunks = std::min(kTargetItems, rows / kMinChunk);
  if (chunks <= 1) {
    *sum = static_cast<float>(0.0 + SumFloatRun(x, rows));
  } else {
    std::vector<double> part(chunks);
    ParallelFor(
        chunks,
        [&](int64_t begin, int64_t end) {
          for (int64_t c = begin; c < end; ++c) {
            const int64_t lo = rows * c / chunks, hi = rows * (c + 1) / chunks;
            part[c] = 0.0 + SumFloatRun(x + lo, hi - lo);
          }
        },
        rows / chunks);
    double acc = part[0];
    for (int64_t c = 1; c < chunks; ++c) acc = acc + part[c];
    *sum = static_cast<float>(acc);
  }
  ParallelFor(rows, [&](int64_t begin, int64_t end) {
    CastRun(x + begin, y + begin, end - begin);
  });
}

template <typename Half>
void SumCastAs(const dg::KernelContext& ctx, int64_t rows, int64_t width) {
  const dg::TensorRef xt = ctx.input(0);
  float* sum = ctx.output(0).data<float>();
  Half* y = ctx.output(1).data<Half>();
  if (width == 0) return;
  if (rows == 0) {
    std::fill(sum, sum + width, 0.0f);  // Sum of nothing; y is empty
    return;
  }
  const float* x = xt.data<const float>();
  RowRuns l;
  if (width == 1 || !SplitRuns(xt.shape(), xt.strides(), width, &l)) {
    if (!xt.is_contiguous()) {
      float* dense = ctx.workspace<float>(rows * width);
      CopyDense(xt, dense);
      x = dense;
    }
    if (width == 1 && rows > 1) {
      SumCastRun(x, rows, sum, y);
      return;
    }
    l = RowRuns{};
    SplitRuns({rows, width}, {width, 1}, width, &l);
    if (l.seg.empty()) {  // width < 8: one run per row all the same
      l.rows = {Dim{rows, width}};
      l.run = width;
      l.seg = {0};
    }
  }
  SumCastColumns(ctx, x, l, rows, width, sum, y);
}

void SumCastGradKernel(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape =
      ctx.has("shape") ? ctx.ints("shape") : xt.shape();
  const int64_t p = ctx.i("num_leading");
  int64_t rows = 1, width = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    (static_cast<int64_t>(i) < p ? rows : width) *= shape[i];
  }
  DG_CHECK(rows * width == xt.numel() && ctx.output(0).numel() == width &&
               ctx.output(1).numel() == xt.numel() &&
               ctx.output(1).is_contiguous(),
           DG_INTERNAL, ctx.op_name(), ": x of shape ", ShapeStr(xt.shape()),
           " read as ", ShapeStr(shape), " does not match its outputs");
  if (ctx.output(1).dtype() == DG_BFLOAT16) {
    SumCastAs<Eigen::bfloat16>(ctx, rows, width);
  } else {
    DG_CHECK(ctx.output(1).dtype() == DG_FLOAT16, DG_INVALID_ARGUMENT,
             ctx.op_name(), ": y must be float16 or bfloat16, got ",
             dg::DTypeName(ctx.output(1).dtype()));
    SumCastAs<Eigen::half>(ctx, rows, width);
  }
}

}  // namespace

// x is read through its strides (see SumCastAs).
DG_KERNEL_MASK("SumCastGrad", "cpu", dg::Bit(DG_FLOAT32), 0,
               DG_KERNEL_STRIDED_INPUTS, SumCastGradKernel);

}  // namespace cpu_eigen
