// Fused optimizer updates (docs/ops.md, "Optimizer updates"; the rules are
// in the schemas, dragon_core/src/ops/optim.cc, and docs/optim.md).
//
// Each kernel makes one pass over the parameter: the elements are split
// into chunks, one per thread when the tensor is large, and each chunk into
// blocks of kBlock elements. A block is computed with Eigen array
// expressions (vectorised; sqrt and division included) into the outputs,
// with the effective gradient and the denominator in stack scratch that
// stays in L1. Every expression is coefficient-wise, so output 0 may be
// input 0's buffer (the schema's Inplace(1)): each element of param is read
// before the same element of param_out is written. Scalar factors (bias
// corrections, the decayed learning rate) are computed in double and cast
// to the element type once, as PyTorch does with its Python-float scalars.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "common.h"

namespace cpu_eigen {
namespace {

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using In = Eigen::Map<const Arr<T>, Eigen::Unaligned>;
template <typename T>
using Out = Eigen::Map<Arr<T>, Eigen::Unaligned>;

// Elements per block: two scratch blocks of doubles fit in 32 KiB of stack.
constexpr int64_t kBlock = 1024;

// The value of one-element input i (lr or step) as a double.
double ReadScalar(const dg::KernelContext& ctx, int32_t i, const char* name) {
  const dg::TensorRef t = ctx.input(i);
  DG_CHECK(t.numel() == 1, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name,
           " must hold one value, got ", t.numel());
  switch (t.dtype()) {
    case DG_FLOAT32:
      return static_cast<double>(*t.data<const float>());
    case DG_FLOAT64:
      return *t.data<const double>();
    case DG_INT32:
      return static_cast<double>(*t.data<const int32_t>());
    case DG_INT64:
      return static_cast<double>(*t.data<const int64_t>());
    default:
      DG_CHECK(false, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name,
               " has dtype ", dg::DTypeName(t.dtype()),
               ", expected float32, float64, int32 or int64");
  }
  return 0.0;
}

// The step count (>= 1, including the step being taken).
double ReadStep(const dg::KernelContext& ctx, int32_t i) {
  const double step = ReadScalar(ctx, i, "step");
  DG_CHECK(step >= 1.0, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": step must be >= 1 (the step count including this step), got ",
           step);
  return step;
}

// Output `out` of a state buffer the options leave unused: a copy of input
// `in` (of any shape; the schema checked the dtype).
void PassThrough(const dg::KernelContext& ctx, int32_t in, int32_t out) {
  const dg::TensorRef x = ctx.input(in), y = ctx.output(out);
  DG_CHECK(x.numel() == y.numel(), DG_INTERNAL, ctx.op_name(), ": output ",
           out, " has ", y.numel(), " elements, input ", in, " has ",
           x.numel());
  const size_t bytes = static_cast<size_t>(x.numel()) *
                       dg::DTypeSize(x.dtype());
  if (bytes > 0 && y.raw_data() != x.raw_data()) {
    std::memcpy(y.raw_data(), x.raw_data(), bytes);
  }
}

// Number of elements of the parameter; checks that input i and output o
// (when given) have as many.
int64_t CheckedCount(const dg::KernelContext& ctx,
                     std::initializer_list<int32_t> inputs,
                     std::initializer_list<int32_t> outputs) {
  const int64_t n = ctx.input(0).numel();
  for (int32_t i : inputs) {
    DG_CHECK(ctx.input(i).numel() == n, DG_INTERNAL, ctx.op_name(),
             ": input ", i, " has ", ctx.input(i).numel(),
             " elements, param has ", n);
  }
  for (int32_t o : outputs) {
    DG_CHECK(ctx.output(o).numel() == n, DG_INTERNAL, ctx.op_name(),
             ": output ", o, " has ", ctx.output(o).numel(),
             " elements, param has ", n);
  }
  return n;
}

// Runs fn(offset, length) over [0, n) in blocks of at most kBlock elements,
// the blocks split across threads when the work is large. `cost` weighs
// one element against a simple operation.
template <typename Fn>
void ForBlocks(int64_t n, int64_t cost, Fn&& fn) {
  ParallelFor(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; i += kBlock) {
          fn(i, std::min(kBlock, end - i));
        }
      },
      cost);
}

// g (negated when maximize) plus weight_decay * p into *out.
template <typename T>
void EffectiveGrad(const T* g, const T* p, int64_t len, bool maximize,
                   T weight_decay, Out<T>* out) {
  const In<T> gv(g, len);
  if (maximize) {
    *out = -gv;
  } else {
    *out = gv;
  }
  if (weight_decay != T(0)) *out += weight_decay * In<T>(p, len);
}

template <typename T>
void SgdUpdate(dg::KernelContext& ctx) {
  const bool use_momentum = ctx.f("momentum") != 0.0;
  const int64_t n =
      use_momentum ? CheckedCount(ctx, {1, 2}, {0, 1})
                   : CheckedCount(ctx, {1}, {0});
  if (!use_momentum) PassThrough(ctx, 2, 1);
  const T lr = static_cast<T>(ReadScalar(ctx, 3, "lr"));
  const T momentum = static_cast<T>(ctx.f("momentum"));
  const T keep = static_cast<T>(1.0 - ctx.f("dampening"));
  const T weight_decay = static_cast<T>(ctx.f("weight_decay"));
  const bool nesterov = ctx.b("nesterov"), maximize = ctx.b("maximize");
  if (n == 0) return;
  const T* p = ctx.input(0).data<const T>();
  const T* g = ctx.input(1).data<const T>();
  const T* buf = use_momentum ? ctx.input(2).data<const T>() : nullptr;
  T* p_out = ctx.output(0).data<T>();
  T* buf_out = use_momentum ? ctx.output(1).data<T>() : nullptr;
  ForBlocks(n, 4, [&](int64_t i, int64_t len) {
    alignas(64) T scratch[kBlock];
    Out<T> d(scratch, len);
    EffectiveGrad(g + i, p + i, len, maximize, weight_decay, &d);
    if (use_momentum) {
      Out<T> b(buf_out + i, len);
      b = momentum * In<T>(buf + i, len) + keep * d;
      if (nesterov) {
        d += momentum * b;
      } else {
        d = b;
      }
    }
    Out<T>(p_out + i, len) = In<T>(p + i, len) - lr * d;
  });
}

template <typename T>
void AdamUpdate(dg::KernelContext& ctx) {
  const bool amsgrad = ctx.b("amsgrad");
  const int64_t n = amsgrad ? CheckedCount(ctx, {1, 2, 3, 4}, {0, 1, 2, 3})
                            : CheckedCount(ctx, {1, 2, 3}, {0, 1, 2});
  if (!amsgrad) PassThrough(ctx, 4, 3);
  const double lr = ReadScalar(ctx, 5, "lr");
  const double step = ReadStep(ctx, 6);
  const double beta1 = ctx.f("beta1"), beta2 = ctx.f("beta2");
  const double weight_decay = ctx.f("weight_decay");
  const bool decoupled = ctx.b("decoupled"), maximize = ctx.b("maximize");
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(beta1, step)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, step)));
  const T eps = static_cast<T>(ctx.f("eps"));
  const T b1 = static_cast<T>(beta1), one_minus_b1 = static_cast<T>(1 - beta1);
  const T b2 = static_cast<T>(beta2), one_minus_b2 = static_cast<T>(1 - beta2);
  const T l2 = decoupled ? T(0) : static_cast<T>(weight_decay);
  const T shrink =
      decoupled ? static_cast<T>(1.0 - lr * weight_decay) : T(1);
  if (n == 0) return;
  const T* p = ctx.input(0).data<const T>();
  const T* g = ctx.input(1).data<const T>();
  const T* m = ctx.input(2).data<const T>();
  const T* v = ctx.input(3).data<const T>();
  const T* vmax = amsgrad ? ctx.input(4).data<const T>() : nullptr;
  T* p_out = ctx.output(0).data<T>();
  T* m_out = ctx.output(1).data<T>();
  T* v_out = ctx.output(2).data<T>();
  T* vmax_out = amsgrad ? ctx.output(3).data<T>() : nullptr;
  ForBlocks(n, 12, [&](int64_t i, int64_t len) {
    alignas(64) T scratch[kBlock];
    Out<T> d(scratch, len);
    EffectiveGrad(g + i, p + i, len, maximize, l2, &d);
    Out<T> mo(m_out + i, len), vo(v_out + i, len);
    mo = b1 * In<T>(m + i, len) + one_minus_b1 * d;
    vo = b2 * In<T>(v + i, len) + one_minus_b2 * d.square();
    // d now holds the denominator.
    if (amsgrad) {
      Out<T> vmo(vmax_out + i, len);
      vmo = In<T>(vmax + i, len).max(vo);
      d = vmo.sqrt() / bc2_sqrt + eps;
    } else {
      d = vo.sqrt() / bc2_sqrt + eps;
    }
    const In<T> pv(p + i, len);
    if (shrink != T(1)) {
      Out<T>(p_out + i, len) = pv * shrink - step_size * (mo / d);
    } else {
      Out<T>(p_out + i, len) = pv - step_size * (mo / d);
    }
  });
}

template <typename T>
void RmspropUpdate(dg::KernelContext& ctx) {
  const bool use_momentum = ctx.f("momentum") != 0.0;
  const bool centered = ctx.b("centered");
  const int64_t n = CheckedCount(ctx, {1, 2}, {0, 1});
  if (use_momentum) {
    CheckedCount(ctx, {3}, {2});
  } else {
    PassThrough(ctx, 3, 2);
  }
  if (centered) {
    CheckedCount(ctx, {4}, {3});
  } else {
    PassThrough(ctx, 4, 3);
  }
  const T lr = static_cast<T>(ReadScalar(ctx, 5, "lr"));
  const T alpha = static_cast<T>(ctx.f("alpha"));
  const T one_minus_alpha = static_cast<T>(1.0 - ctx.f("alpha"));
  const T eps = static_cast<T>(ctx.f("eps"));
  const T weight_decay = static_cast<T>(ctx.f("weight_decay"));
  const T momentum = static_cast<T>(ctx.f("momentum"));
  const bool maximize = ctx.b("maximize");
  if (n == 0) return;
  const T* p = ctx.input(0).data<const T>();
  const T* g = ctx.input(1).data<const T>();
  const T* s = ctx.input(2).data<const T>();
  const T* buf = use_momentum ? ctx.input(3).data<const T>() : nullptr;
  const T* a = centered ? ctx.input(4).data<const T>() : nullptr;
  T* p_out = ctx.output(0).data<T>();
  T* s_out = ctx.output(1).data<T>();
  T* buf_out = use_momentum ? ctx.output(2).data<T>() : nullptr;
  T* a_out = centered ? ctx.output(3).data<T>() : nullptr;
  ForBlocks(n, 12, [&](int64_t i, int64_t len) {
    alignas(64) T grad_scratch[kBlock];
    alignas(64) T den_scratch[kBlock];
    Out<T> d(grad_scratch, len), den(den_scratch, len);
    EffectiveGrad(g + i, p + i, len, maximize, weight_decay, &d);
    Out<T> so(s_out + i, len);
    so = alpha * In<T>(s + i, len) + one_minus_alpha * d.square();
    if (centered) {
      Out<T> ao(a_out + i, len);
      ao = alpha * In<T>(a + i, len) + one_minus_alpha * d;
      den = (so - ao.square()).sqrt() + eps;
    } else {
      den = so.sqrt() + eps;
    }
    const In<T> pv(p + i, len);
    if (use_momentum) {
      Out<T> bo(buf_out + i, len);
      bo = momentum * In<T>(buf + i, len) + d / den;
      Out<T>(p_out + i, len) = pv - lr * bo;
    } else {
      Out<T>(p_out + i, len) = pv - lr * (d / den);
    }
  });
}

template <typename T>
void AdagradUpdate(dg::KernelContext& ctx) {
  const int64_t n = CheckedCount(ctx, {1, 2}, {0, 1});
  const double lr = ReadScalar(ctx, 3, "lr");
  const double step = ReadStep(ctx, 4);
  const T clr =
      static_cast<T>(lr / (1.0 + (step - 1.0) * ctx.f("lr_decay")));
  const T eps = static_cast<T>(ctx.f("eps"));
  const T weight_decay = static_cast<T>(ctx.f("weight_decay"));
  const bool maximize = ctx.b("maximize");
  if (n == 0) return;
  const T* p = ctx.input(0).data<const T>();
  const T* g = ctx.input(1).data<const T>();
  const T* sum = ctx.input(2).data<const T>();
  T* p_out = ctx.output(0).data<T>();
  T* sum_out = ctx.output(1).data<T>();
  ForBlocks(n, 10, [&](int64_t i, int64_t len) {
    alignas(64) T scratch[kBlock];
    Out<T> d(scratch, len);
    EffectiveGrad(g + i, p + i, len, maximize, weight_decay, &d);
    Out<T> so(sum_out + i, len);
    so = In<T>(sum + i, len) + d.square();
    Out<T>(p_out + i, len) = In<T>(p + i, len) - clr * (d / (so.sqrt() + eps));
  });
}

DG_KERNEL_EX("SgdUpdate", "cpu", 0, DG_KERNEL_INPLACE, SgdUpdate, float,
             double);
DG_KERNEL_EX("AdamUpdate", "cpu", 0, DG_KERNEL_INPLACE, AdamUpdate, float,
             double);
DG_KERNEL_EX("RmspropUpdate", "cpu", 0, DG_KERNEL_INPLACE, RmspropUpdate,
             float, double);
DG_KERNEL_EX("AdagradUpdate", "cpu", 0, DG_KERNEL_INPLACE, AdagradUpdate,
             float, double);

}  // namespace
}  // namespace cpu_eigen
