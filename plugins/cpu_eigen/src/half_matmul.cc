// float16 and bfloat16 MatMul (NumPy matmul semantics, as matmul.cc):
// both operands are widened to dense float32 copies (widen_call.h), the
// float32 GEMM of src/gemm/ (GemmBest) multiplies them with float32
// accumulation, and the product is rounded once to the 16-bit type. So the
// result is the float32 product correctly rounded, as torch computes
// half-type products on the CPU.
#include <cstdint>
#include <vector>

#include "common.h"
#include "gemm/gemm.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

// One dense float32 operand: batch dims, then a stored rows x cols matrix.
struct Dense {
  const float* data = nullptr;
  std::vector<int64_t> batch;
  int64_t rows = 0, cols = 0;  // as stored (row-major)
  bool trans = false;          // the logical matrix is the transpose
};

Dense AsDense(const widen_call::Wide& w, bool is_a, bool transpose) {
  Dense d;
  d.data = w.data;
  const int64_t r = static_cast<int64_t>(w.shape.size());
  if (r == 1) {  // a: a row [1, K]; b: a column [K, 1]
    d.rows = is_a ? 1 : w.shape[0];
    d.cols = is_a ? w.shape[0] : 1;
    return d;
  }
  d.rows = w.shape[r - 2];
  d.cols = w.shape[r - 1];
  d.trans = transpose;
  d.batch.assign(w.shape.begin(), w.shape.end() - 2);
  return d;
}

// Element offsets of each output batch item into an operand whose batch
// dims broadcast against `out_batch` (right-aligned; size-1 dims repeat).
std::vector<int64_t> BatchOffsets(const Dense& d,
                                  const std::vector<int64_t>& out_batch) {
  const size_t nb = out_batch.size(), db = d.batch.size();
  std::vector<int64_t> stride(nb, 0);
  int64_t s = d.rows * d.cols;
  for (size_t i = 0; i < db; ++i) {
    const size_t src = db - 1 - i, dst = nb - 1 - i;
    stride[dst] = d.batch[src] == 1 ? 0 : s;
    s *= d.batch[src];
  }
  int64_t total = 1;
  for (int64_t v : out_batch) total *= v;
  std::vector<int64_t> offsets(static_cast<size_t>(total), 0);
  std::vector<int64_t> idx(nb, 0);
  int64_t off = 0;
  for (int64_t t = 0; t < total; ++t) {
    offsets[t] = off;
    for (size_t k = nb; k-- > 0;) {
      if (++idx[k] < out_batch[k]) {
        off += stride[k];
        break;
      }
      off -= stride[k] * (out_batch[k] - 1);
      idx[k] = 0;
    }
  }
  return offsets;
}

template <typename T>
void HalfMatMul(dg::KernelContext& ctx) {
  const DgCallFrame* f = ctx.frame();
  widen_call::Wide wa, wb, wy;
  widen_call::MakeWide(ctx, *f->inputs[0], &wa);
  widen_call::MakeWide(ctx, *f->inputs[1], &wb);
  widen_call::Widen<T>(*f->inputs[0], wa.data, wa.numel);
  widen_call::Widen<T>(*f->inputs[1], wb.data, wb.numel);
  const Dense a = AsDense(wa, true, ctx.b("transpose_a"));
  const Dense b = AsDense(wb, false, ctx.b("transpose_b"));
  const int64_t n = a.trans ? a.cols : a.rows;
  const int64_t k = a.trans ? a.rows : a.cols;
  const int64_t m = b.trans ? b.rows : b.cols;
  const int64_t kb = b.trans ? b.cols : b.rows;
  DG_CHECK(k == kb, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": inner dimensions differ (", k, " vs ", kb, ")");
  const dg::TensorRef yt = ctx.output(0);
  widen_call::MakeWide(ctx, *f->outputs[0], &wy);
  // Output batch: every output axis but the matrix axes (1-D operands drop
  // theirs).
  const size_t drop = (wa.shape.size() == 1 ? 0 : 1) +
                      (wb.shape.size() == 1 ? 0 : 1);
  std::vector<int64_t> out_batch = yt.shape();
  out_batch.resize(out_batch.size() - drop);
  int64_t batch = 1;
  for (int64_t v : out_batch) batch *= v;
  DG_CHECK(batch * n * m == wy.numel, DG_INTERNAL, ctx.op_name(),
           ": output of ", wy.numel, " elements for a product of ", batch,
           " x ", n, " x ", m);
  if (wy.numel > 0) {
    if (k == 0) {
      std::fill(wy.data, wy.data + wy.numel, 0.0f);
    } else {
      const std::vector<int64_t> ao = BatchOffsets(a, out_batch);
      const std::vector<int64_t> bo = BatchOffsets(b, out_batch);
      GemmCall<float> call{};
      call.batch = batch;
      call.n = n;
      call.m = m;
      call.k = k;
      call.a = a.data;
      call.lda = a.cols;
      call.trans_a = a.trans;
      call.a_offsets = ao.data();
      call.b = b.data;
      call.ldb = b.cols;
      call.trans_b = b.trans;
      call.b_offsets = bo.data();
      call.c = wy.data;
      call.ldc = m;
      call.c_stride = n * m;
      GemmBest(call);
    }
  }
  widen_call::Narrow<T>(wy.data, *f->outputs[0], wy.numel);
}

}  // namespace

DG_KERNEL("MatMul", "cpu", HalfMatMul, Eigen::half, Eigen::bfloat16);

}  // namespace cpu_eigen
