// MatMul kernels for the dtypes matmul.cc does not serve (NumPy matmul
// semantics, as there).
//
// float16 and bfloat16:
// both operands are widened to dense float32 copies (widen_call.h), the
// float32 GEMM of src/gemm/ (GemmBest) multiplies them with float32
// accumulation, and the product is rounded once to the 16-bit type. So the
// result is the float32 product correctly rounded, as torch computes
// half-type products on the CPU. With out_dtype=float32 (autocast's
// matmuls) the float32 product is written as it is, without the rounding.
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
  // out_dtype=float32: the GEMM writes y itself (outputs are dense).
  const bool f32_out = yt.dtype() == DG_FLOAT32;
  DG_CHECK(f32_out || yt.dtype() == f->inputs[0]->dtype, DG_INTERNAL,
           ctx.op_name(), ": output dtype ", dg::DTypeName(yt.dtype()),
           " for operands of dtype ", dg::DTypeName(f->inputs[0]->dtype));
  widen_call::MakeWide(ctx, *f->outputs[0], &wy, /*alias_float32=*/f32_out);
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
  if (!f32_out) widen_call::Narrow<T>(wy.data, *f->outputs[0], wy.numel);
}

// Widens an int32 tensor (any strides) to a dense uint64 copy of its
// logical matrices (transposed when `trans`): [batch..., rows, cols].
std::vector<uint64_t> WidenInt(const DgTensorView& v, bool trans,
                               int64_t* rows, int64_t* cols) {
  const int32_t* src = reinterpret_cast<const int32_t*>(
      static_cast<const char*>(v.data) + v.byte_offset);
  int64_t n = 1;
  for (int32_t d = 0; d < v.ndim; ++d) n *= v.shape[d];
  std::vector<uint64_t> dense(static_cast<size_t>(n));
  widen_call::ForEachOffset(v, [&](int64_t off, int64_t k) {
    dense[k] = static_cast<uint64_t>(static_cast<int64_t>(src[off]));
  });
  const int64_t r = v.ndim >= 2 ? v.shape[v.ndim - 2] : 1;
  const int64_t c = v.shape[v.ndim - 1];
  *rows = r;
  *cols = c;
  if (!trans || r * c <= 1 || n == 0) return dense;
  std::vector<uint64_t> t(dense.size());
  for (int64_t b = 0; b < n / (r * c); ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        t[b * r * c + j * r + i] = dense[b * r * c + i * c + j];
  *rows = c;
  *cols = r;
  return t;
}

void Int32MatMul(dg::KernelContext& ctx) {
  const DgCallFrame* f = ctx.frame();
  const DgTensorView& av = *f->inputs[0];
  const DgTensorView& bv = *f->inputs[1];
  const bool a_vec = av.ndim == 1, b_vec = bv.ndim == 1;
  int64_t ar, ac, br, bc;
  const std::vector<uint64_t> a =
      WidenInt(av, !a_vec && ctx.b("transpose_a"), &ar, &ac);
  const std::vector<uint64_t> b =
      WidenInt(bv, !b_vec && ctx.b("transpose_b"), &br, &bc);
  if (b_vec) {  // a column [K, 1]
    br = bc;
    bc = 1;
  }
  DG_CHECK(ac == br, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": inner dimensions differ (", ac, " vs ", br, ")");
  const int64_t n = ar, k = ac, m = bc;
  Dense da, db;  // for the batch offsets only
  da.rows = n;
  da.cols = k;
  db.rows = k;
  db.cols = m;
  if (!a_vec) da.batch.assign(av.shape, av.shape + av.ndim - 2);
  if (!b_vec) db.batch.assign(bv.shape, bv.shape + bv.ndim - 2);
  const dg::TensorRef yt = ctx.output(0);
  std::vector<int64_t> out_batch = yt.shape();
  out_batch.resize(out_batch.size() - (a_vec ? 0 : 1) - (b_vec ? 0 : 1));
  int64_t batch = 1;
  for (int64_t v : out_batch) batch *= v;
  DG_CHECK(batch * n * m == yt.numel(), DG_INTERNAL, ctx.op_name(),
           ": output of ", yt.numel(), " elements for a product of ", batch,
           " x ", n, " x ", m);
  DG_CHECK(yt.is_contiguous(), DG_INTERNAL, ctx.op_name(),
           ": the output must be contiguous");
  int32_t* y = yt.data<int32_t>();
  if (batch * n * m == 0) return;
  const std::vector<int64_t> ao = BatchOffsets(da, out_batch);
  const std::vector<int64_t> bo = BatchOffsets(db, out_batch);
  ParallelFor(
      batch * n,
      [&](int64_t begin, int64_t end) {
        std::vector<uint64_t> acc(static_cast<size_t>(m));
        for (int64_t q = begin; q < end; ++q) {
          const int64_t t = q / n, i = q % n;
          const uint64_t* arow = a.data() + ao[t] + i * k;
          const uint64_t* bmat = b.data() + bo[t];
          std::fill(acc.begin(), acc.end(), uint64_t{0});
          for (int64_t p = 0; p < k; ++p) {
            const uint64_t x = arow[p];
            const uint64_t* brow = bmat + p * m;
            for (int64_t j = 0; j < m; ++j) acc[j] += x * brow[j];
          }
          int32_t* yrow = y + q * m;
          for (int64_t j = 0; j < m; ++j)
            yrow[j] = static_cast<int32_t>(static_cast<uint32_t>(acc[j]));
        }
      },
      k * m);
}

}  // namespace

DG_KERNEL("MatMul", "cpu", HalfMatMul, Eigen::half, Eigen::bfloat16);
DG_KERNEL_MASK("MatMul", "cpu", dg::Bit(DG_INT32), 0, 0, Int32MatMul);

}  // namespace cpu_eigen
