// Element-wise unary kernels on cuda, with the op names, attributes and
// semantics of cpu_eigen's (plugins/cpu_eigen/src/unary.cc, compare.cc):
// y = f(x), x read through its strides. float16/bfloat16 compute in float.
// Integer Neg/Abs/Square wrap (two's complement) as on the CPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "elementwise.cuh"
#include "ops.cuh"

namespace dragon_cuda {
namespace {

using namespace fn;  // NOLINT: the op functors

constexpr uint32_t kStrided = DG_KERNEL_STRIDED_INPUTS;


// Adapts f: Acc<T> -> Acc<T> to T -> T (16-bit floats go through float).
template <typename T, typename F>
struct Lift {
  F f;
  __device__ T operator()(T x) const { return static_cast<T>(f(static_cast<Acc<T>>(x))); }
};

template <typename T, typename F>
void Run(dg::KernelContext& ctx, F f) {
  LaunchUnary<T, T>(ctx, Lift<T, F>{f});
}

// ------------------------------------------------------------ numeric ops


#define DGC_UNARY(NAME, F, ...)                                        \
  template <typename T>                                               \
  void NAME(dg::KernelContext& ctx) {                                 \
    Run<T>(ctx, F{});                                                 \
  }                                                                   \
  DG_KERNEL_EX(#NAME, "cuda", 0, kStrided, NAME, __VA_ARGS__)

#define DGC_NUMERIC float, double, half, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t
#define DGC_FLOATS float, double, half, bf16

DGC_UNARY(Neg, NegF, DGC_NUMERIC);
DGC_UNARY(Abs, AbsF, DGC_NUMERIC);
DGC_UNARY(Sign, SignF, DGC_NUMERIC);
DGC_UNARY(Square, SquareF, DGC_NUMERIC);
DGC_UNARY(Relu, ReluF, DGC_NUMERIC);

// ------------------------------------------------------------ float ops


DGC_UNARY(Reciprocal, ReciprocalF, DGC_FLOATS);
DGC_UNARY(Sqrt, SqrtF, DGC_FLOATS);
DGC_UNARY(Rsqrt, RsqrtF, DGC_FLOATS);
DGC_UNARY(Exp, ExpF, DGC_FLOATS);
DGC_UNARY(Log, LogF, DGC_FLOATS);
DGC_UNARY(Log1p, Log1pF, DGC_FLOATS);
DGC_UNARY(Sin, SinF, DGC_FLOATS);
DGC_UNARY(Cos, CosF, DGC_FLOATS);
DGC_UNARY(Tanh, TanhF, DGC_FLOATS);
DGC_UNARY(Sigmoid, SigmoidF, DGC_FLOATS);
DGC_UNARY(Floor, FloorF, DGC_FLOATS);
DGC_UNARY(Ceil, CeilF, DGC_FLOATS);
DGC_UNARY(Round, RoundF, DGC_FLOATS);

// The C library's functions (cpu_eigen's unary_math.cc).
DGC_UNARY(Tan, TanF, DGC_FLOATS);
DGC_UNARY(Asin, AsinF, DGC_FLOATS);
DGC_UNARY(Acos, AcosF, DGC_FLOATS);
DGC_UNARY(Atan, AtanF, DGC_FLOATS);
DGC_UNARY(Sinh, SinhF, DGC_FLOATS);
DGC_UNARY(Cosh, CoshF, DGC_FLOATS);
DGC_UNARY(Asinh, AsinhF, DGC_FLOATS);
DGC_UNARY(Acosh, AcoshF, DGC_FLOATS);
DGC_UNARY(Atanh, AtanhF, DGC_FLOATS);
DGC_UNARY(Erf, ErfF, DGC_FLOATS);
DGC_UNARY(Expm1, Expm1F, DGC_FLOATS);

#undef DGC_UNARY

// ------------------------------------------------------------ with attributes

template <typename T>
void LeakyRelu(dg::KernelContext& ctx) {
  Run<T>(ctx, LeakyReluF<Acc<T>>{static_cast<Acc<T>>(ctx.f("alpha"))});
}
DG_KERNEL_EX("LeakyRelu", "cuda", 0, kStrided, LeakyRelu, DGC_FLOATS);

template <typename T>
void Elu(dg::KernelContext& ctx) {
  Run<T>(ctx, EluF<Acc<T>>{static_cast<Acc<T>>(ctx.f("alpha"))});
}
DG_KERNEL_EX("Elu", "cuda", 0, kStrided, Elu, DGC_FLOATS);

template <typename T>
void Gelu(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": approximate must be \"none\" or \"tanh\", got \"", mode, "\"");
  if (mode == "tanh") {
    Run<T>(ctx, GeluTanhF{});
  } else {
    Run<T>(ctx, GeluErfF{});
  }
}
DG_KERNEL_EX("Gelu", "cuda", 0, kStrided, Gelu, DGC_FLOATS);

// GeluGrad(x, dy) -> dy * gelu'(x), as cpu_eigen's gelu_grad.cc: the exact
// form Phi(x) + x phi(x) in double (erfc keeps Phi's relative accuracy for
// negative x, where the two terms nearly cancel); the tanh form
// s(v) + x s(v) s(-v) v' from e = exp(-|v|) (no overflow). x is clamped
// to [-40, 40] / [-30, 30], where gelu' is 0 or 1, so +-inf gives 0 / 1;
// NaN stays NaN.
struct GeluErfGradF {
  template <typename A>
  __device__ A operator()(A x, A dy) const {
    if (isnan(x)) return x;
    double c = static_cast<double>(x);
    c = c < -40.0 ? -40.0 : (c > 40.0 ? 40.0 : c);
    const double slope = 0.5 * erfc(-0.70710678118654752440 * c) +
                         c * exp(-0.5 * c * c) * 0.39894228040143267794;
    return static_cast<A>(static_cast<double>(dy) * slope);
  }
};
struct GeluTanhGradF {
  template <typename A>
  __device__ A operator()(A x, A dy) const {
    if (isnan(x)) return x;
    const A k1 = A(1.5957691216057307117), k3 = A(0.071354816272600249);
    const A c = x < A(-30) ? A(-30) : (x > A(30) ? A(30) : x);
    const A v = c * (k1 + k3 * c * c);
    const A e = exp(-fabs(v));
    const A p = A(1) / (A(1) + e), q = e * p;
    return dy * ((v >= A(0) ? p : q) + c * p * q * (k1 + A(3) * k3 * c * c));
  }
};

template <typename T, typename F>
struct LiftGrad {
  F f;
  __device__ T operator()(T x, T dy) const {
    return static_cast<T>(f(static_cast<Acc<T>>(x), static_cast<Acc<T>>(dy)));
  }
};

template <typename T>
void GeluGrad(dg::KernelContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": approximate must be \"none\" or \"tanh\", got \"", mode, "\"");
  if (mode == "tanh") {
    LaunchBinary<T, T, T>(ctx, LiftGrad<T, GeluTanhGradF>{GeluTanhGradF{}});
  } else {
    LaunchBinary<T, T, T>(ctx, LiftGrad<T, GeluErfGradF>{GeluErfGradF{}});
  }
}
DG_KERNEL_EX("GeluGrad", "cuda", 0, kStrided, GeluGrad, DGC_FLOATS);

// log(1 + e^(βx)) / β, or x where βx > threshold.
template <typename A>
struct SoftplusF {
  A beta, threshold;
  __device__ A operator()(A x) const {
    const A z = beta * x;
    if (z > threshold) return x;
    return ((z > A(0) ? z : A(0)) + log1p(exp(-fabs(z)))) / beta;
  }
};
template <typename T>
void Softplus(dg::KernelContext& ctx) {
  Run<T>(ctx, SoftplusF<Acc<T>>{static_cast<Acc<T>>(ctx.f("beta")),
                                static_cast<Acc<T>>(ctx.f("threshold"))});
}
DG_KERNEL_EX("Softplus", "cuda", 0, kStrided, Softplus, DGC_FLOATS);

// NumPy clip: minimum(maximum(x, lo), hi), NaN-propagating; an unset bound
// is ±inf (floats) or the type's limit; integer bounds saturate.
template <typename A>
struct ClipF {
  A lo, hi;
  __device__ A operator()(A x) const {
    if (IsNan(x) || IsNan(lo) || IsNan(hi)) return IsNan(x) ? x : IsNan(lo) ? lo : hi;
    const A y = x > lo ? x : lo;
    return y < hi ? y : hi;
  }
};
template <typename A>
A ClipBound(const dg::KernelContext& ctx, const char* name, bool upper) {
  using L = std::numeric_limits<A>;
  if (!ctx.has(name)) {
    if constexpr (L::has_infinity) {
      return upper ? L::infinity() : -L::infinity();
    } else {
      return upper ? L::max() : L::lowest();
    }
  }
  const double v = ctx.f(name);
  if constexpr (std::is_floating_point<A>::value) {
    return static_cast<A>(v);
  } else {
    DG_CHECK(!std::isnan(v), DG_INVALID_ARGUMENT, ctx.op_name(), ": ", name,
             " is NaN, which has no integer value");
    if (v <= static_cast<double>(L::lowest())) return L::lowest();
    if (v >= static_cast<double>(L::max())) return L::max();
    return static_cast<A>(v);
  }
}
template <typename T>
void Clip(dg::KernelContext& ctx) {
  using A = Acc<T>;
  // 16-bit floats: the bounds rounded to T first, as a T-typed CPU kernel.
  A lo = ClipBound<A>(ctx, "min", false), hi = ClipBound<A>(ctx, "max", true);
  if constexpr (kIsHalf<T>) {
    lo = static_cast<A>(Convert<T>(lo));
    hi = static_cast<A>(Convert<T>(hi));
  }
  Run<T>(ctx, ClipF<A>{lo, hi});
}
DG_KERNEL_EX("Clip", "cuda", 0, kStrided, Clip, DGC_NUMERIC);

// ------------------------------------------------------------ LogicalNot

template <typename T>
struct IsZero {
  __device__ bool operator()(T x) const { return static_cast<Acc<T>>(x) == Acc<T>(0); }
};
template <typename T>
void LogicalNot(dg::KernelContext& ctx) {
  LaunchUnary<T, bool>(ctx, IsZero<T>{});
}
DG_KERNEL_EX("LogicalNot", "cuda", 0, kStrided, LogicalNot, bool, DGC_NUMERIC);

}  // namespace
}  // namespace dragon_cuda
