// MatMul with NumPy `matmul` semantics.
//
// 1-D operands are promoted (a to a row, b to a column) and the added axis
// is not in the output; `transpose_a` / `transpose_b` swap the last two
// axes of a rank >= 2 operand; batch dimensions broadcast. The kernel reads
// inputs through their strides: any operand whose matrices have a unit
// stride along either of their two axes (a transposed view, for instance)
// is used in place, as a row-major or column-major matrix; others are
// copied to a dense scratch buffer first.
//
// The products run in src/gemm/, built for the baseline and (on x86-64) for
// x86-64-v3 and -v4; the best one this CPU supports is picked at first use
// (gemm_dispatch.cc). DRAGON_CPU_EIGEN_ISA=base|v2|v3 caps the choice (for
// testing and benchmarking the other builds).
//
// Batches of small float32 products (attention's q k^T, p v and their
// gradients) have a second kernel, MatMulBatchedF32Avx512 (priority 20,
// above mkldnn's oneDNN matmul at 10; src/gemm/batched_f32.cc): each
// thread takes whole batch items, so there is no barrier inside a product,
// and the operands are read in place. Its supports() takes a call only
// when
//   * the CPU runs x86-64-v4 (AVX-512; DRAGON_CPU_EIGEN_ISA may cap it);
//   * both operands and the output are float32, the op MatMul, the output
//     dense;
//   * the batch has at least as many items as there are threads (and at
//     least 2), and every item is of the class where it measured faster
//     than oneDNN's kernel (BatchedWorthwhile below).
// DRAGON_CPU_EIGEN_BATCHED_GEMM=all takes every float32 MatMul of two
// operands of rank >= 2 (tests, A/B runs), =off none.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "gemm/batch_axes.h"
#include "gemm/batched_f32.h"
#include "gemm/gemm.h"
#include "reduce_util.h"

namespace cpu_eigen {
namespace {

// ------------------------------------------------------------ ISA choice

// Logs the GEMM build in use (debug level), once.
template <typename T>
void RunGemm(const dg::KernelContext& ctx, const GemmCall<T>& call) {
  static const bool logged = [&ctx] {
    const DgHostApi* host = ctx.frame()->host;
    if (host && host->log) {
      host->log(0, dg::Str("cpu_eigen MatMul uses ", GemmBestDescribe()).c_str());
    }
    return true;
  }();
  (void)logged;
  GemmBest(call);
}

// ------------------------------------------------------------ operands

// One operand seen as a stack of logical matrices (rows x cols) stored
// row-major with leading dimension `ld`, transposed when `trans`.
template <typename T>
struct Operand {
  const T* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool trans = false;
  int64_t ld = 0;
  std::vector<int64_t> batch_shape, batch_strides;
};

// Describes input `index` as an operand. `is_a` selects the 1-D promotion
// (a: a row, b: a column). `transpose` applies to rank >= 2 only.
template <typename T>
Operand<T> AsOperand(const dg::KernelContext& ctx, int index, bool is_a,
                     bool transpose) {
  const dg::TensorRef t = ctx.input(index);
  Operand<T> op;
  const int32_t nd = t.ndim();
  int64_t r, c, sr, sc;  // stored matrix: r x c with strides (sr, sc)
  if (nd == 1) {
    transpose = false;
    if (is_a) {
      r = 1, c = t.dim(0), sr = c * t.stride(0), sc = t.stride(0);
    } else {
      r = t.dim(0), c = 1, sr = t.stride(0), sc = 1;
    }
  } else {
    r = t.dim(-2), c = t.dim(-1), sr = t.stride(-2), sc = t.stride(-1);
    for (int32_t i = 0; i < nd - 2; ++i) {
      op.batch_shape.push_back(t.dim(i));
      op.batch_strides.push_back(t.stride(i));
    }
  }
  op.rows = transpose ? c : r;
  op.cols = transpose ? r : c;
  op.data = t.data<const T>();
  // A unit stride along either axis lets the matrix be used in place (an
  // axis of extent 1 has no meaningful stride).
  const bool row_major = (c == 1 || sc == 1) && (r == 1 || sr >= 1);
  const bool col_major = (r == 1 || sr == 1) && (c == 1 || sc >= 1);
  if (row_major) {
    op.ld = r == 1 ? c : sr;
    op.trans = transpose;
  } else if (col_major) {
    op.ld = c == 1 ? r : sc;
    op.trans = !transpose;
  } else {
    // Dense copy, whose strides are the contiguous ones.
    T* dense = ctx.workspace<T>(t.numel());
    CopyDense(t, dense);
    op.data = dense;
    op.ld = c;
    op.trans = transpose;
    op.batch_strides = ContiguousStrides(op.batch_shape);
    for (int64_t& s : op.batch_strides) s *= r * c;
  }
  op.ld = std::max<int64_t>(op.ld, 1);
  return op;
}

template <typename T>
void MatMul(dg::KernelContext& ctx) {
  const dg::TensorRef at = ctx.input(0), bt = ctx.input(1);
  const bool trans_a = ctx.b("transpose_a"), trans_b = ctx.b("transpose_b");
  DG_CHECK(at.ndim() >= 1 && bt.ndim() >= 1, DG_INVALID_ARGUMENT,
           "MatMul: operands must have rank >= 1, got shapes ",
           ShapeStr(at.shape()), " and ", ShapeStr(bt.shape()));
  const Operand<T> a = AsOperand<T>(ctx, 0, true, trans_a);
  const Operand<T> b = AsOperand<T>(ctx, 1, false, trans_b);
  DG_CHECK(a.cols == b.rows, DG_INVALID_ARGUMENT,
           "MatMul: inner sizes differ: a ", ShapeStr(at.shape()),
           " (transpose_a=", trans_a ? "true" : "false", ") and b ",
           ShapeStr(bt.shape()), " (transpose_b=", trans_b ? "true" : "false",
           ")");

  // Broadcast the batch dimensions (aligned from the right).
  const size_t nb = std::max(a.batch_shape.size(), b.batch_shape.size());
  std::vector<int64_t> shape(nb, 1), sa(nb, 0), sb(nb, 0);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t ia = static_cast<int64_t>(i + a.batch_shape.size()) - nb;
    const int64_t ib = static_cast<int64_t>(i + b.batch_shape.size()) - nb;
    const int64_t da = ia >= 0 ? a.batch_shape[ia] : 1;
    const int64_t db = ib >= 0 ? b.batch_shape[ib] : 1;
    DG_CHECK(da == db || da == 1 || db == 1, DG_INVALID_ARGUMENT,
             "MatMul: batch dimensions do not broadcast: a ",
             ShapeStr(at.shape()), " and b ", ShapeStr(bt.shape()));
    shape[i] = std::max(da, db);
    if (da != 1) sa[i] = a.batch_strides[ia];
    if (db != 1) sb[i] = b.batch_strides[ib];
    if (da == 0 || db == 0) shape[i] = 0;
  }
  const int64_t batch = Numel(shape);
  const int64_t n = a.rows, m = b.cols, k = a.cols;
  const dg::TensorRef yt = ctx.output(0);
  DG_CHECK(yt.numel() == batch * n * m, DG_INTERNAL, "MatMul: output has ",
           yt.numel(), " elements, expected ", batch * n * m, " for a ",
           ShapeStr(at.shape()), " and b ", ShapeStr(bt.shape()));
  if (yt.numel() == 0) return;

  GemmCall<T> call{};
  call.batch = batch;
  call.n = n;
  call.m = m;
  call.k = k;
  call.a = a.data;
  call.lda = a.ld;
  call.trans_a = a.trans;
  call.b = b.data;
  call.ldb = b.ld;
  call.trans_b = b.trans;
  call.c = yt.data<T>();
  call.ldc = m;
  call.c_stride = n * m;
  if (batch > 1) {
    std::vector<Dim> da, db;
    for (size_t i = 0; i < nb; ++i) {
      da.push_back({shape[i], sa[i]});
      db.push_back({shape[i], sb[i]});
    }
    int64_t* offsets = ctx.workspace<int64_t>(2 * batch);
    Odometer ia(da, nb, 0), ib(db, nb, 0);
    bool a_stacks_rows = !a.trans, b_shared = true;
    for (int64_t i = 0; i < batch; ++i, ia.Next(), ib.Next()) {
      offsets[i] = ia.offset();
      offsets[batch + i] = ib.offset();
      a_stacks_rows = a_stacks_rows && offsets[i] == i * n * a.ld;
      b_shared = b_shared && offsets[batch + i] == 0;
    }
    if (a_stacks_rows && b_shared) {
      // One B for every item and the A matrices stacked row after row:
      // a single (batch * n) x k product.
      call.n = batch * n;
      call.batch = 1;
    } else {
      call.a_offsets = offsets;
      call.b_offsets = offsets + batch;
    }
  }
  RunGemm(ctx, call);
}

// MatMul, then y = act(y + bias) row by row (the bias along the last axis).
template <typename T>
void MatMulBiasAct(dg::KernelContext& ctx) {
  MatMul<T>(ctx);
  const dg::TensorRef yt = ctx.output(0);
  const bool relu = ctx.s("activation") == "relu";
  const bool has_bias = ctx.num_inputs() > 2;
  if (yt.numel() == 0 || (!relu && !has_bias)) return;
  // Rows of the product's last axis (the bias's length), so the epilogue
  // is split across threads even without a bias; a 0-d product is one row.
  const int64_t cols = yt.shape().empty() ? 1 : yt.shape().back();
  const int64_t rows = yt.numel() / cols;
  const T* bias = has_bias ? ctx.input(2).data<const T>() : nullptr;
  // Inputs may be strided views: gather a strided bias first.
  if (bias && cols > 1 && ctx.input(2).strides()[0] != 1) {
    const int64_t stride = ctx.input(2).strides()[0];
    T* packed = ctx.workspace<T>(cols);
    for (int64_t c = 0; c < cols; ++c) packed[c] = bias[c * stride];
    bias = packed;
  }
  T* y = yt.data<T>();
  // Relu's semantics: NaN stays NaN, -0 and negatives become +0.
  auto act = [](T v) { return v > T(0) || v != v ? v : T(0); };
  ParallelFor(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* row = y + r * cols;
      if (bias && relu) {
        for (int64_t c = 0; c < cols; ++c) row[c] = act(row[c] + bias[c]);
      } else if (bias) {
        for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] = act(row[c]);
      }
    }
  }, cols);
}

#ifdef CPU_EIGEN_BATCHED_F32

// ------------------------------------------------- batched small products

// One operand as a stack of logical matrices: element (r, c) of item i at
// data + offset_i + r * rs + c * cs.
struct StridedMatrix {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  std::vector<int64_t> batch_shape, batch_strides;
};

StridedMatrix AsStrided(const DgTensorView* t, bool transpose) {
  StridedMatrix m;
  m.data = reinterpret_cast<const float*>(static_cast<const char*>(t->data) +
                                          t->byte_offset);
  const int nd = t->ndim;
  m.rows = t->shape[nd - 2], m.cols = t->shape[nd - 1];
  m.rs = t->strides[nd - 2], m.cs = t->strides[nd - 1];
  if (transpose) std::swap(m.rows, m.cols), std::swap(m.rs, m.cs);
  m.batch_shape.assign(t->shape, t->shape + nd - 2);
  m.batch_strides.assign(t->strides, t->strides + nd - 2);
  return m;
}

struct BatchedProblem {
  BatchedF32Call call{};
  StridedMatrix a, b;
  std::vector<int64_t> batch_shape;  // the output's batch axes
};

// Builds the problem; false when the kernel cannot compute the call.
bool DescribeBatched(const DgCallFrame* f, BatchedProblem* p) {
  if (std::strcmp(f->op_name, "MatMul") != 0) return false;
  if (f->num_inputs != 2 || f->num_outputs != 1) return false;
  const DgTensorView *at = f->inputs[0], *bt = f->inputs[1];
  const DgTensorView* yt = f->outputs[0];
  if (!at || !bt || !yt || at->ndim < 2 || bt->ndim < 2) return false;
  if (at->dtype != DG_FLOAT32 || bt->dtype != DG_FLOAT32 ||
      yt->dtype != DG_FLOAT32) {
    return false;
  }
  const dg::AttrReader attrs(f->num_attrs, f->attrs, f->attr_names,
                             f->op_name);
  p->a = AsStrided(at, attrs.b("transpose_a"));
  p->b = AsStrided(bt, attrs.b("transpose_b"));
  if (p->a.cols != p->b.rows) return false;
  int64_t batch = 1;
  if (!BroadcastBatchAxes(p->a.batch_shape, p->b.batch_shape, &p->batch_shape, &batch))
    return false;
  const int64_t n = p->a.rows, m = p->b.cols, k = p->a.cols;
  if (!DenseWithElements(yt, batch * n * m)) return false;
  BatchedF32Call& c = p->call;
  c.batch = batch;
  c.n = n, c.m = m, c.k = k;
  c.a = p->a.data, c.a_rs = p->a.rs, c.a_cs = p->a.cs;
  c.b = p->b.data, c.b_rs = p->b.rs, c.b_cs = p->b.cs;
  c.ldc = m;
  c.c_stride = n * m;
  return true;
}

// DRAGON_CPU_EIGEN_BATCHED_GEMM, read once (ParseGemmPolicy).
GemmPolicy BatchedPolicyFromEnv() {
  static const GemmPolicy policy = ParseGemmPolicy("DRAGON_CPU_EIGEN_BATCHED_GEMM");
  return policy;
}

// Items whose sides (n, m, k) are all within [kBatchedMinSide,
// kBatchedMaxSide] are the measured class (docs/benchmarks.md, "attn":
// 1.04-1.24x oneDNN on attention's six products, 1.0-1.4x on dense batched
// squares of side 8-256, a tie from 96 up; not measured outside).
constexpr int64_t kBatchedMinSide = 8;
constexpr int64_t kBatchedMaxSide = 256;

int BatchedThreads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

bool BatchedWorthwhile(const BatchedF32Call& c) {
  const GemmPolicy policy = BatchedPolicyFromEnv();
  if (policy == GemmPolicy::kOff) return false;
  if (policy == GemmPolicy::kAll) return true;
  if (c.batch < 2 || c.batch < BatchedThreads()) return false;
  const auto in = [](int64_t v) {
    return v >= kBatchedMinSide && v <= kBatchedMaxSide;
  };
  return in(c.n) && in(c.m) && in(c.k);
}

void MatMulBatchedF32(dg::KernelContext& ctx) {
  BatchedProblem p;
  DG_CHECK(DescribeBatched(ctx.frame(), &p) && DetectIsaLevel() >= 4,
           DG_INTERNAL,
           "MatMul: the batched float32 kernel was chosen for a call its "
           "supports() declines");
  BatchedF32Call& call = p.call;
  if (call.batch * call.n * call.m == 0) return;
  int64_t* offsets = ctx.workspace<int64_t>(2 * call.batch);
  for (int side = 0; side < 2; ++side) {
    const StridedMatrix& mtx = side == 0 ? p.a : p.b;
    int64_t* out = offsets + side * call.batch;
    const size_t nb = p.batch_shape.size(), nm = mtx.batch_shape.size();
    std::vector<Dim> dims;
    for (size_t i = 0; i < nb; ++i) {
      const int64_t j = static_cast<int64_t>(i + nm) - static_cast<int64_t>(nb);
      const int64_t stride =
          j >= 0 && mtx.batch_shape[j] != 1 ? mtx.batch_strides[j] : 0;
      dims.push_back({p.batch_shape[i], stride});
    }
    Odometer it(dims, nb, 0);
    for (int64_t i = 0; i < call.batch; ++i, it.Next()) out[i] = it.offset();
  }
  call.a_offsets = offsets;
  call.b_offsets = offsets + call.batch;
  call.c = ctx.output(0).data<float>();
  call.threads = BatchedThreads();
  const int64_t bytes = gemm_batched_f32::WorkspaceBytes(call);
  if (bytes > 0) {
    char* raw = ctx.workspace<char>(static_cast<size_t>(bytes) + 64);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(raw);
    call.workspace = raw + ((64 - addr % 64) % 64);
  }
  gemm_batched_f32::Gemm(call);
}

int32_t SupportsBatchedF32(const DgCallFrame* f) {
  try {
    if (DetectIsaLevel() < 4) return 0;
    BatchedProblem p;
    return DescribeBatched(f, &p) && BatchedWorthwhile(p.call) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// Above mkldnn's oneDNN matmul (priority 10): see the top of this file.
constexpr int32_t kMatMulBatchedF32Priority = 20;

[[maybe_unused]] const int kBatchedRegistered =
    dg::internal::AddKernel("MatMul", "cpu", dg::Bit(DG_FLOAT32),
                            kMatMulBatchedF32Priority, DG_KERNEL_STRIDED_INPUTS,
                            "MatMulBatchedF32Avx512", &MatMulBatchedF32,
                            &SupportsBatchedF32);

#endif  // CPU_EIGEN_BATCHED_F32

}  // namespace

DG_KERNEL_EX("MatMul", "cpu", 0, DG_KERNEL_STRIDED_INPUTS, MatMul, float,
             double);
// Inputs may be strided, the bias too (the kernel packs a strided bias).
DG_KERNEL_EX("MatMulBiasAct", "cpu", 0, DG_KERNEL_STRIDED_INPUTS,
             MatMulBiasAct, float, double);

}  // namespace cpu_eigen
