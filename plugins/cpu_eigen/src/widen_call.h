// float16 and bfloat16 kernels of the compound ops (convolution, pooling,
// normalization, ScatterAdd) by running their float32 kernel: every
// 16-bit float input is widened into a float32 scratch copy, the float32
// kernel runs on a call frame that names the copies, and every 16-bit
// output is rounded once (nearest, ties to even) from its float32 result.
// So the half-type result is the float32 result correctly rounded: all
// accumulation (window sums, dot products, moments) is in float32 or wider,
// as torch does on the CPU. Inputs and outputs of other dtypes (pooling
// indices) pass through untouched.
//
// Use: CPU_EIGEN_WIDENED_KERNEL("Conv2d", Conv2d) beside the op's float
// registration, where Conv2d<float> is the float32 kernel.
#ifndef DRAGON_CPU_EIGEN_WIDEN_CALL_H_
#define DRAGON_CPU_EIGEN_WIDEN_CALL_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "cast.h"
#include "common.h"
#include "dragon/plugin.hpp"

namespace cpu_eigen {
namespace widen_call {

inline bool IsHalf(DgDType t) { return t == DG_FLOAT16 || t == DG_BFLOAT16; }

// One tensor's float32 stand-in: a contiguous view of a scratch buffer.
struct Wide {
  DgTensorView view{};
  std::vector<int64_t> shape, strides;
  float* data = nullptr;
  int64_t numel = 0;
};

// Calls fn(element offset of the tensor, linear index) for every element of
// `v` in row-major order, following its strides.
template <typename Fn>
void ForEachOffset(const DgTensorView& v, Fn&& fn) {
  int64_t n = 1;
  for (int32_t i = 0; i < v.ndim; ++i) n *= v.shape[i];
  if (n == 0) return;
  std::vector<int64_t> idx(static_cast<size_t>(v.ndim), 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    fn(off, k);
    for (int32_t d = v.ndim - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) {
        off += v.strides[d];
        break;
      }
      off -= v.strides[d] * (v.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

inline bool IsContiguous(const DgTensorView& v) {
  // An empty tensor has no element to place: dense whatever its strides
  // (a float16 MatMul with out_dtype=float32 and an empty product failed).
  for (int32_t d = 0; d < v.ndim; ++d) {
    if (v.shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int32_t d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expected) return false;
    expected *= v.shape[d];
  }
  return true;
}

template <typename H>
void Widen(const DgTensorView& v, float* dst, int64_t n) {
  const H* src = reinterpret_cast<const H*>(static_cast<const char*>(v.data) +
                                            v.byte_offset);
  if (IsContiguous(v)) {
    ParallelFor(n, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<H, Eigen::bfloat16>) {
        Bfloat16ToFloat(src + begin, dst + begin, end - begin);  // cast.h
      } else {
        for (int64_t k = begin; k < end; ++k) dst[k] = static_cast<float>(src[k]);
      }
    });
    return;
  }
  ForEachOffset(v, [&](int64_t off, int64_t k) {
    dst[k] = static_cast<float>(src[off]);
  });
}

template <typename H>
void Narrow(const float* src, const DgTensorView& v, int64_t n) {
  H* dst = reinterpret_cast<H*>(static_cast<char*>(v.data) + v.byte_offset);
  if (IsContiguous(v)) {
    ParallelFor(n, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<H, Eigen::bfloat16>) {
        FloatToBfloat16(src + begin, dst + begin, end - begin);  // cast.h
      } else {
        for (int64_t k = begin; k < end; ++k) dst[k] = static_cast<H>(src[k]);
      }
    });
    return;
  }
  ForEachOffset(v, [&](int64_t off, int64_t k) {
    dst[off] = static_cast<H>(src[k]);
  });
}

// With alias_float32, src is a dense float32 tensor (an output) used as its
// own stand-in: no scratch copy.
inline void MakeWide(dg::KernelContext& ctx, const DgTensorView& src,
                     Wide* w, bool alias_float32 = false) {
  w->shape.assign(src.shape, src.shape + src.ndim);
  w->strides.assign(static_cast<size_t>(src.ndim), 1);
  w->numel = 1;
  for (int32_t d = src.ndim - 1; d >= 0; --d) {
    w->strides[d] = w->numel;
    w->numel *= src.shape[d];
  }
  if (alias_float32) {
    DG_CHECK(src.dtype == DG_FLOAT32 && IsContiguous(src), DG_INTERNAL,
             "MakeWide: a float32 alias must be a dense float32 tensor");
    w->data = reinterpret_cast<float*>(static_cast<char*>(src.data) +
                                       src.byte_offset);
  } else {
    w->data = ctx.workspace<float>(static_cast<size_t>(w->numel));
  }
  w->view = src;
  w->view.dtype = DG_FLOAT32;
  w->view.data = w->data;
  w->view.byte_offset = 0;
  w->view.shape = w->shape.data();
  w->view.strides = w->strides.data();
}

// Runs the float32 kernel `fn` for a call whose float inputs and outputs
// are float16 or bfloat16 (all of one type, the op's dtype).
inline void RunInFloat(dg::KernelContext& ctx, dg::KernelFunc fn) {
  const DgCallFrame* f = ctx.frame();
  const int32_t ni = f->num_inputs, no = f->num_outputs;
  std::vector<Wide> wide(static_cast<size_t>(ni + no));
  std::vector<const DgTensorView*> ins(static_cast<size_t>(ni));
  std::vector<const DgTensorView*> outs(static_cast<size_t>(no));
  for (int32_t i = 0; i < ni; ++i) {
    const DgTensorView* v = f->inputs[i];
    ins[i] = v;
    if (v == nullptr || !IsHalf(v->dtype)) continue;
    Wide& w = wide[i];
    MakeWide(ctx, *v, &w);
    if (v->dtype == DG_FLOAT16)
      Widen<Eigen::half>(*v, w.data, w.numel);
    else
      Widen<Eigen::bfloat16>(*v, w.data, w.numel);
    ins[i] = &w.view;
  }
  for (int32_t i = 0; i < no; ++i) {
    const DgTensorView* v = f->outputs[i];
    outs[i] = v;
    if (v == nullptr || !IsHalf(v->dtype)) continue;
    Wide& w = wide[ni + i];
    MakeWide(ctx, *v, &w);
    outs[i] = &w.view;
  }
  DgCallFrame inner = *f;
  inner.inputs = ins.data();
  inner.outputs = outs.data();
  // The float32 kernel's call-site caches (keyed on constant inputs) would
  // see fresh scratch copies on every run: run it as in eager mode.
  inner.call_site_state = nullptr;
  dg::KernelContext inner_ctx(&inner);
  fn(inner_ctx);
  for (int32_t i = 0; i < no; ++i) {
    const DgTensorView* v = f->outputs[i];
    if (v == nullptr || !IsHalf(v->dtype)) continue;
    if (v->dtype == DG_FLOAT16)
      Narrow<Eigen::half>(wide[ni + i].data, *v, wide[ni + i].numel);
    else
      Narrow<Eigen::bfloat16>(wide[ni + i].data, *v,
                              wide[ni + i].numel);
  }
}

}  // namespace widen_call
}  // namespace cpu_eigen

// Registers the float16 and bfloat16 kernels of OP as FUNC<float> run in
// float32 (see above). FUNC is the op's kernel template in this file.
#define CPU_EIGEN_WIDENED_KERNEL(OP, FUNC)                                \
  template <typename T>                                                   \
  void FUNC##InFloat(dg::KernelContext& ctx) {                            \
    ::cpu_eigen::widen_call::RunInFloat(ctx, &FUNC<float>);               \
  }                                                                       \
  DG_KERNEL(OP, "cpu", FUNC##InFloat, Eigen::half, Eigen::bfloat16)

#endif  // DRAGON_CPU_EIGEN_WIDEN_CALL_H_
