// Fused optimizer updates (docs/ops.md, "Optimizer updates"; the rules are
// in the schemas, dragon_core/src/ops/optim.cc, and docs/optim.md).
//
// Each kernel makes one pass over the parameter: the elements are split
// into chunks, one per thread when the tensor is large, and each chunk into
// blocks of kBlock elements. A block is computed with Eigen array
// expressions (vectorised; sqrt and division included) into the outputs,
// with the effective gradient and the denominator in stack scratch that
// stays in L1; Adam's block is one plain loop built per instruction set
// (optim_isa.h: AVX-512 where the CPU has it, the same bits everywhere). Every expression is coefficient-wise, so output 0 may be
// input 0's buffer (the schema's Inplace(1)): each element of param is read
// before the same element of param_out is written. Scalar factors (bias
// corrections, the decayed learning rate) are computed in double and cast
// to the element type once, as PyTorch does with its Python-float scalars.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common.h"
#include "optim_isa.h"

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

// One SGD step over [i, i + len) of one parameter; every pointer but the
// unused momentum ones is set. Shared by SgdUpdate and MultiSgdUpdate, so
// both give the same bits.
template <typename T>
struct SgdStep {
  T lr, momentum, keep, weight_decay;
  bool use_momentum, nesterov, maximize;

  SgdStep(const dg::KernelContext& ctx, double lr_value)
      : lr(static_cast<T>(lr_value)),
        momentum(static_cast<T>(ctx.f("momentum"))),
        keep(static_cast<T>(1.0 - ctx.f("dampening"))),
        weight_decay(static_cast<T>(ctx.f("weight_decay"))),
        use_momentum(ctx.f("momentum") != 0.0),
        nesterov(ctx.b("nesterov")),
        maximize(ctx.b("maximize")) {}

  void operator()(const T* p, const T* g, const T* buf, T* p_out, T* buf_out,
                  int64_t i, int64_t len) const {
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
  }
};

// bfloat16: every value is widened to float32 and each intermediate is
// rounded to bfloat16 where PyTorch's single-tensor SGD rounds it (the
// weight-decayed gradient, the momentum buffer after mul_ and after add_,
// the Nesterov gradient, the parameter), so a bfloat16 parameter takes the
// same steps as under torch.optim.SGD on the CPU. The scalars are rounded
// as torch's kernels round them: an add's alpha (weight_decay, 1 -
// dampening, the Nesterov momentum, -lr) to bfloat16 first, mul_'s
// momentum kept in float32.
template <>
struct SgdStep<Eigen::bfloat16> {
  using B = Eigen::bfloat16;
  float lr, momentum, momentum_alpha, keep, weight_decay;
  bool use_momentum, nesterov, maximize;

  static float Round(float v) {
    return static_cast<float>(static_cast<B>(v));
  }

  SgdStep(const dg::KernelContext& ctx, double lr_value)
      : lr(Round(static_cast<float>(lr_value))),
        momentum(static_cast<float>(ctx.f("momentum"))),
        momentum_alpha(Round(static_cast<float>(ctx.f("momentum")))),
        keep(Round(static_cast<float>(1.0 - ctx.f("dampening")))),
        weight_decay(Round(static_cast<float>(ctx.f("weight_decay")))),
        use_momentum(ctx.f("momentum") != 0.0),
        nesterov(ctx.b("nesterov")),
        maximize(ctx.b("maximize")) {}

  void operator()(const B* p, const B* g, const B* buf, B* p_out, B* buf_out,
                  int64_t i, int64_t len) const {
    for (int64_t k = i; k < i + len; ++k) {
      const float pk = static_cast<float>(p[k]);
      float d = static_cast<float>(g[k]);
      if (maximize) d = -d;
      if (weight_decay != 0.f) d = Round(d + weight_decay * pk);
      if (use_momentum) {
        const float b =
            Round(Round(static_cast<float>(buf[k]) * momentum) + keep * d);
        buf_out[k] = static_cast<B>(b);
        d = nesterov ? Round(d + momentum_alpha * b) : b;
      }
      p_out[k] = static_cast<B>(pk - lr * d);
    }
  }
};

template <typename T>
void SgdUpdate(dg::KernelContext& ctx) {
  const bool use_momentum = ctx.f("momentum") != 0.0;
  const int64_t n =
      use_momentum ? CheckedCount(ctx, {1, 2}, {0, 1})
                   : CheckedCount(ctx, {1}, {0});
  if (!use_momentum) PassThrough(ctx, 2, 1);
  const SgdStep<T> step(ctx, ReadScalar(ctx, 3, "lr"));
  if (n == 0) return;
  const T* p = ctx.input(0).data<const T>();
  const T* g = ctx.input(1).data<const T>();
  const T* buf = use_momentum ? ctx.input(2).data<const T>() : nullptr;
  T* p_out = ctx.output(0).data<T>();
  T* buf_out = use_momentum ? ctx.output(1).data<T>() : nullptr;
  ForBlocks(n, 4, [&](int64_t i, int64_t len) {
    step(p, g, buf, p_out, buf_out, i, len);
  });
}

// One Adam step over [i, i + len) of one parameter (vmax pointers only with
// amsgrad). Shared by AdamUpdate and MultiAdamUpdate.
template <typename T>
struct AdamStep {
  T step_size, bc2_sqrt, eps, b1, one_minus_b1, b2, one_minus_b2, l2, shrink;
  bool amsgrad, maximize;
  bool stream = false;  // AdamParams::stream

  AdamStep(const dg::KernelContext& ctx, double lr, double step) {
    const double beta1 = ctx.f("beta1"), beta2 = ctx.f("beta2");
    const double weight_decay = ctx.f("weight_decay");
    const bool decoupled = ctx.b("decoupled");
    amsgrad = ctx.b("amsgrad");
    maximize = ctx.b("maximize");
    step_size = static_cast<T>(lr / (1.0 - std::pow(beta1, step)));
    bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, step)));
    eps = static_cast<T>(ctx.f("eps"));
    b1 = static_cast<T>(beta1);
    one_minus_b1 = static_cast<T>(1 - beta1);
    b2 = static_cast<T>(beta2);
    one_minus_b2 = static_cast<T>(1 - beta2);
    l2 = decoupled ? T(0) : static_cast<T>(weight_decay);
    shrink = decoupled ? static_cast<T>(1.0 - lr * weight_decay) : T(1);
  }

  // The element loop is optim_isa.cc's, built per instruction set.
  void operator()(const T* p, const T* g, const T* m, const T* v,
                  const T* vmax, T* p_out, T* m_out, T* v_out, T* vmax_out,
                  int64_t i, int64_t len) const {
    const AdamParams<T> a{step_size, bc2_sqrt, eps,     b1,      one_minus_b1,
                          b2,        one_minus_b2, l2, shrink, amsgrad,
                          maximize,  stream};
    OptimKernelsFor<T>().adam(a, p + i, g + i, m + i, v + i,
                              amsgrad ? vmax + i : nullptr, p_out + i,
                              m_out + i, v_out + i,
                              amsgrad ? vmax_out + i : nullptr, len);
  }
};

template <typename T>
void AdamUpdate(dg::KernelContext& ctx) {
  const bool amsgrad = ctx.b("amsgrad");
  const int64_t n = amsgrad ? CheckedCount(ctx, {1, 2, 3, 4}, {0, 1, 2, 3})
                            : CheckedCount(ctx, {1, 2, 3}, {0, 1, 2});
  if (!amsgrad) PassThrough(ctx, 4, 3);
  const AdamStep<T> step(ctx, ReadScalar(ctx, 5, "lr"), ReadStep(ctx, 6));
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
    step(p, g, m, v, vmax, p_out, m_out, v_out, vmax_out, i, len);
  });
}

// The multi-tensor forms: every parameter's elements are cut into blocks of
// at most kBlock, and one parallel loop runs over all blocks of all
// parameters (one OpenMP region per call instead of one per parameter).
struct Block {
  int32_t tensor;
  int64_t offset, len;
};

// Blocks of parameters 0..n-1 (inputs first..first+n-1); checks that the
// `used` roles (role r: inputs first + r*n + k, outputs r_out*n + k) match
// each parameter's element count.
std::vector<Block> MultiBlocks(const dg::KernelContext& ctx, int32_t first,
                               int32_t n, std::initializer_list<int32_t> roles,
                               std::initializer_list<int32_t> out_roles) {
  std::vector<Block> blocks;
  for (int32_t k = 0; k < n; ++k) {
    const int64_t count = ctx.input(first + k).numel();
    for (int32_t r : roles) {
      DG_CHECK(ctx.input(first + r * n + k).numel() == count, DG_INTERNAL,
               ctx.op_name(), ": tensor ", r * n + k, " has ",
               ctx.input(first + r * n + k).numel(), " elements, params[", k,
               "] has ", count);
    }
    for (int32_t r : out_roles) {
      DG_CHECK(ctx.output(r * n + k).numel() == count, DG_INTERNAL,
               ctx.op_name(), ": output ", r * n + k, " has ",
               ctx.output(r * n + k).numel(), " elements, params[", k,
               "] has ", count);
    }
    for (int64_t i = 0; i < count; i += kBlock) {
      blocks.push_back({k, i, std::min(kBlock, count - i)});
    }
  }
  // Part-major order: with T threads, part q of every parameter (its
  // blocks [nb q / T, nb (q + 1) / T)) before part q + 1, so that the
  // static split of the list gives thread q the q-th share of each
  // parameter: the elements of a parameter's q-th share are then written
  // by the thread that reads them in the element-wise ops of the next step
  // (the mixed-precision weight casts split by elements too), which keeps
  // them on one core (see gemm/batched_f32.cc ForEachItem on why that
  // matters on this host). Every block is still computed alone: the same
  // bits in any order.
  const int64_t parts = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (parts > 1) {
    std::vector<Block> ordered;
    ordered.reserve(blocks.size());
    for (int64_t q = 0; q < parts; ++q) {
      size_t first = 0;
      while (first < blocks.size()) {
        size_t last = first;
        while (last < blocks.size() && blocks[last].tensor == blocks[first].tensor) ++last;
        const int64_t nb = static_cast<int64_t>(last - first);
        for (int64_t j = nb * q / parts; j < nb * (q + 1) / parts; ++j) {
          ordered.push_back(blocks[first + j]);
        }
        first = last;
      }
    }
    return ordered;
  }
  return blocks;
}

int32_t MultiN(const dg::KernelContext& ctx, int32_t first, int32_t roles,
               int32_t out_roles) {
  const int32_t total = ctx.num_inputs() - first;
  DG_CHECK(total > 0 && total % roles == 0 &&
               ctx.num_outputs() == total / roles * out_roles,
           DG_INTERNAL, ctx.op_name(), ": ", total, " tensors and ",
           ctx.num_outputs(), " outputs do not make whole parameters");
  return total / roles;
}

// Data pointers of inputs first + r*n + k (outputs r*n + k) for the roles
// r in `roles`, role-major; nullptr for a role not in use (-1).
template <typename T>
std::vector<const T*> InPtrs(const dg::KernelContext& ctx, int32_t first,
                             int32_t n, std::initializer_list<int32_t> roles) {
  std::vector<const T*> out;
  for (int32_t r : roles) {
    for (int32_t k = 0; k < n; ++k) {
      out.push_back(r < 0 ? nullptr
                          : ctx.input(first + r * n + k).data<const T>());
    }
  }
  return out;
}

template <typename T>
std::vector<T*> OutPtrs(const dg::KernelContext& ctx, int32_t n,
                        std::initializer_list<int32_t> roles) {
  std::vector<T*> out;
  for (int32_t r : roles) {
    for (int32_t k = 0; k < n; ++k) {
      out.push_back(r < 0 ? nullptr : ctx.output(r * n + k).data<T>());
    }
  }
  return out;
}

template <typename T>
void MultiSgdUpdate(dg::KernelContext& ctx) {
  const int32_t n = MultiN(ctx, 1, 3, 2);
  const bool use_momentum = ctx.f("momentum") != 0.0;
  if (!use_momentum) {
    for (int32_t k = 0; k < n; ++k) PassThrough(ctx, 1 + 2 * n + k, n + k);
  }
  const SgdStep<T> step(ctx, ReadScalar(ctx, 0, "lr"));
  const std::vector<Block> blocks =
      use_momentum ? MultiBlocks(ctx, 1, n, {1, 2}, {0, 1})
                   : MultiBlocks(ctx, 1, n, {1}, {0});
  const int32_t m = use_momentum ? 1 : -1;
  const std::vector<const T*> in = InPtrs<T>(ctx, 1, n, {0, 1, 2 * m});
  const std::vector<T*> out = OutPtrs<T>(ctx, n, {0, m});
  ParallelFor(
      static_cast<int64_t>(blocks.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int32_t k = blocks[b].tensor;
          step(in[k], in[n + k], in[2 * n + k], out[k], out[n + k],
               blocks[b].offset, blocks[b].len);
        }
      },
      4 * kBlock);
}

// Whether MultiAdamUpdate writes the new moments with non-temporal stores
// (AdamParams::stream): only with DRAGON_CPU_EIGEN_ADAM_STREAM=1 (read once,
// at first use; bench/ab_nongemm.py compares both in separate processes).
// Meant for a state much larger than the caches, whose moments are evicted
// before the next step reads them, so reading their lines for ownership
// first is wasted traffic: a standalone loop over 790 K cold parameters ran
// 4-18% faster with it, but on the compiled encoder steps of issue 21 two
// separate-process A/B runs on the shared machine disagreed (-8%/-13% and
// +2%/+10% Adam time; docs/benchmarks.md, "nongemm"), so it stays off until
// a quiet machine decides. The values are the same either way.
bool StreamAdamState() {
  static const bool on = [] {
    const char* env = std::getenv("DRAGON_CPU_EIGEN_ADAM_STREAM");
    return env != nullptr && env[0] == '1' && env[1] == '\0';
  }();
  return on;
}

template <typename T>
void MultiAdamUpdate(dg::KernelContext& ctx) {
  const int32_t n = MultiN(ctx, 1, 6, 4);
  const bool amsgrad = ctx.b("amsgrad");
  if (!amsgrad) {
    for (int32_t k = 0; k < n; ++k) PassThrough(ctx, 1 + 4 * n + k, 3 * n + k);
  }
  const double lr = ReadScalar(ctx, 0, "lr");
  std::vector<AdamStep<T>> steps;
  steps.reserve(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    steps.emplace_back(ctx, lr, ReadStep(ctx, 1 + 5 * n + k));
  }
  const std::vector<Block> blocks =
      amsgrad ? MultiBlocks(ctx, 1, n, {1, 2, 3, 4}, {0, 1, 2, 3})
              : MultiBlocks(ctx, 1, n, {1, 2, 3}, {0, 1, 2});
  const bool stream = StreamAdamState();
  for (AdamStep<T>& s : steps) s.stream = stream;
  const int32_t a = amsgrad ? 1 : -1;
  const std::vector<const T*> in = InPtrs<T>(ctx, 1, n, {0, 1, 2, 3, 4 * a});
  const std::vector<T*> out = OutPtrs<T>(ctx, n, {0, 1, 2, 3 * a});
  ParallelFor(
      static_cast<int64_t>(blocks.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int32_t k = blocks[b].tensor;
          steps[k](in[k], in[n + k], in[2 * n + k], in[3 * n + k],
                   in[4 * n + k], out[k], out[n + k], out[2 * n + k],
                   out[3 * n + k], blocks[b].offset, blocks[b].len);
        }
      },
      12 * kBlock);
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
             double, Eigen::bfloat16);
DG_KERNEL_EX("AdamUpdate", "cpu", 0, DG_KERNEL_INPLACE, AdamUpdate, float,
             double);
DG_KERNEL_EX("MultiSgdUpdate", "cpu", 0, 0, MultiSgdUpdate, float, double);
DG_KERNEL_EX("MultiAdamUpdate", "cpu", 0, 0, MultiAdamUpdate, float, double);
DG_KERNEL_EX("RmspropUpdate", "cpu", 0, DG_KERNEL_INPLACE, RmspropUpdate,
             float, double);
DG_KERNEL_EX("AdagradUpdate", "cpu", 0, DG_KERNEL_INPLACE, AdagradUpdate,
             float, double);

}  // namespace
}  // namespace cpu_eigen
