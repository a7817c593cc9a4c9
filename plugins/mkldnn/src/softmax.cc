// Softmax and LogSoftmax along any axis on oneDNN's softmax primitive
// (schemas in dragon_core/src/ops/softmax.cc; their gradients are written
// with ops, so there is no backward kernel here). float32 and bfloat16.
// For float32 cpu_eigen's kernel (priority 20, issue 21) outranks this one:
// dispatch picks oneDNN's for bfloat16, and for float32 only under a pin
// (plugins.pin("Softmax", "cpu", "mkldnn::Softmax")); docs/nn_ops.md.
//
// x is viewed as [outer, n] with the softmax axis last, so the cached
// primitive depends only on those two sizes. An axis followed by non-trivial
// axes (inner > 1) is declined: oneDNN 3.2 has no JIT kernel for it and its
// reference kernel is ~10x slower than cpu_eigen (docs/nn_ops.md).
//
// A slice holding a NaN or +inf comes out all NaN in the core (the
// max-shifted exponentials are NaN); oneDNN leaves NaN only where it
// arises, so each output slice with a NaN is filled with NaN afterwards
// (one pass over y, while it is still in cache).
#include <cstdint>
#include <algorithm>

#include "common.h"

namespace mkldnn_plugin {
namespace {

// The [outer, n, inner] view of a call along `axis` (any sign).
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split SplitAt(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const int32_t rank = x.ndim();
  int64_t axis = ctx.i("axis");
  if (axis < 0) axis += rank;
  DG_CHECK(rank == 0 ? axis == 0 : (axis >= 0 && axis < rank),
           DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", ctx.i("axis"),
           " out of range for rank ", rank);
  Split s;
  for (int32_t i = 0; i < rank; ++i) {
    int64_t& part = i < axis ? s.outer : i == axis ? s.n : s.inner;
    part *= x.dim(i);
  }
  return s;
}

// supports(): the axis is the last non-trivial one, or there is nothing to
// compute. Never throws.
int32_t Supports(const DgCallFrame* f) {
  try {
    const dg::KernelContext ctx(f);
    return ctx.input(0).numel() == 0 || SplitAt(ctx).inner == 1 ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// Fills every row of y [rows, n] that holds a NaN with NaN. Bits is the
// unsigned integer of the element's width (float32: uint32_t, bfloat16:
// uint16_t), tested with IsNanBits (an integer test that vectorizes).
template <typename Bits>
void SpreadNan(void* y, int64_t rows, int64_t n) {
  Bits* p = static_cast<Bits*>(y);
#pragma omp parallel for schedule(static) if (rows * n >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    Bits* row = p + r * n;
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any |= IsNanBits(row[i]);
    if (any) std::fill(row, row + n, kQuietNanBits<Bits>);
  }
}

void SpreadNan(const dg::TensorRef& y, const Split& s) {
  if (y.dtype() == DG_BFLOAT16) {
    SpreadNan<uint16_t>(y.raw_data(), s.outer, s.n);
  } else {
    SpreadNan<uint32_t>(y.raw_data(), s.outer, s.n);
  }
}

template <dnnl::algorithm kAlg>
void SoftmaxK(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  if (x.numel() == 0) return;
  const Split s = SplitAt(ctx);
  DG_CHECK(s.inner == 1, DG_INTERNAL, ctx.op_name(),
           ": the axis is not the last non-trivial one (supports() declines "
           "this call)");
  const dnnl::memory::data_type dt = DataType(x.dtype());
  const dnnl::memory::desc md = Plain({s.outer, s.n}, dt);
  auto p = Cached<dnnl::softmax_forward>(
      Key("softmax", static_cast<int>(kAlg), s.outer, s.n,
          static_cast<int>(dt)),
      [&] {
        return dnnl::softmax_forward::primitive_desc(
            Engine(), dnnl::prop_kind::forward_inference, kAlg, md, md, 1,
            Attr());
      });
  Execute(ctx, p.prim, *p.pd,
          {{DNNL_ARG_SRC, Memory(md, x)}, {DNNL_ARG_DST, Memory(md, y)}});
  SpreadNan(y, s);
}

[[maybe_unused]] const int kRegistered[] = {
    dg::internal::AddKernel("Softmax", "cpu", kF32Bf16, kPriority, 0,
                            "mkldnn::Softmax",
                            &SoftmaxK<dnnl::algorithm::softmax_accurate>,
                            &Supports),
    dg::internal::AddKernel("LogSoftmax", "cpu", kF32Bf16, kPriority, 0,
                            "mkldnn::LogSoftmax",
                            &SoftmaxK<dnnl::algorithm::softmax_log>,
                            &Supports),
};

}  // namespace
}  // namespace mkldnn_plugin
