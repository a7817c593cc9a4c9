// The element-wise op functors shared by the unary and binary kernels and
// FusedElementwise (so that a fused program computes exactly what the
// unfused ops compute). Each works on the arithmetic type A (float for the
// 16-bit floats) with cpu_eigen's semantics (elementwise_ops.h).
#ifndef DRAGON_CUDA_OPS_CUH_
#define DRAGON_CUDA_OPS_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace dragon_cuda {
namespace fn {

template <typename T>
__device__ inline bool IsNan(T x) {
  if constexpr (std::is_floating_point<T>::value) {
    return x != x;
  } else {
    return false;
  }
}

// Integer arithmetic in the unsigned type: wraps instead of overflowing.
template <typename T>
using Wrap = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// ------------------------------------------------------------ unary

struct NegF {
  template <typename A>
  __device__ A operator()(A x) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(Wrap<A>{0} - static_cast<Wrap<A>>(x));
    } else {
      return -x;
    }
  }
};
struct AbsF {
  template <typename A>
  __device__ A operator()(A x) const {
    if constexpr (std::is_floating_point<A>::value) {
      return fabs(x);
    } else if constexpr (std::is_unsigned<A>::value) {
      return x;
    } else {
      return x < 0 ? NegF{}(x) : x;  // the most negative value stays put
    }
  }
};
struct SignF {  // NaN stays NaN, -0 gives +0 (NumPy)
  template <typename A>
  __device__ A operator()(A x) const {
    if constexpr (std::is_unsigned<A>::value) {
      return static_cast<A>(x != A(0));
    } else {
      if (IsNan(x)) return x;
      return static_cast<A>(static_cast<int>(x > A(0)) - static_cast<int>(x < A(0)));
    }
  }
};
struct SquareF {
  template <typename A>
  __device__ A operator()(A x) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(x) * static_cast<Wrap<A>>(x));
    } else {
      return x * x;
    }
  }
};
struct ReluF {  // NumPy maximum(x, 0): NaN propagates, relu(-0) = +0
  template <typename A>
  __device__ A operator()(A x) const { return x > A(0) || IsNan(x) ? x : A(0); }
};

#define DGC_FLOAT_FN(NAME, EXPR)                     \
  struct NAME {                                      \
    template <typename A>                            \
    __device__ A operator()(A x) const { return EXPR; } \
  };

DGC_FLOAT_FN(ReciprocalF, A(1) / x)
DGC_FLOAT_FN(SqrtF, sqrt(x))
DGC_FLOAT_FN(RsqrtF, A(1) / sqrt(x))
DGC_FLOAT_FN(ExpF, exp(x))
DGC_FLOAT_FN(LogF, log(x))
DGC_FLOAT_FN(Log1pF, log1p(x))
DGC_FLOAT_FN(SinF, sin(x))
DGC_FLOAT_FN(CosF, cos(x))
DGC_FLOAT_FN(TanhF, tanh(x))
DGC_FLOAT_FN(FloorF, floor(x))
DGC_FLOAT_FN(CeilF, ceil(x))
DGC_FLOAT_FN(RoundF, nearbyint(x))  // half to even, as NumPy

// e^x / (1 + e^x) for x < 0, so that neither form overflows.
struct SigmoidF {
  template <typename A>
  __device__ A operator()(A x) const {
    if (x < A(0)) {
      const A e = exp(x);
      return e / (A(1) + e);
    }
    return A(1) / (A(1) + exp(-x));
  }
};

template <typename A>
struct LeakyReluF {
  A alpha;
  __device__ A operator()(A x) const { return x > A(0) ? x : alpha * x; }
};

template <typename A>
struct EluF {
  A alpha;
  __device__ A operator()(A x) const { return x > A(0) ? x : alpha * expm1(x); }
};

// x·Φ(x) with Φ(x) = erfc(-x/√2)/2 (accurate for negative x); float in
// double, as cpu_eigen's scalar form.
struct GeluErfF {
  template <typename A>
  __device__ A operator()(A x) const {
    if (isinf(x) && x < A(0)) return A(-0.0);
    const double v = static_cast<double>(x);
    return static_cast<A>(0.5 * v * erfc(-0.70710678118654752440 * v));
  }
};
// x / (1 + e^(-2u)), u = √(2/π)(x + 0.044715x³).
struct GeluTanhF {
  template <typename A>
  __device__ A operator()(A x) const {
    const A c1 = A(-1.5957691216057307117), c3 = A(-0.071354816272600249);
    const A v = x * (c1 + c3 * x * x);  // -2u
    if (v <= A(0)) return x / (A(1) + exp(v));
    if (isinf(x)) return A(-0.0);
    const A e = exp(-v);
    return x * e / (A(1) + e);
  }
};

// ------------------------------------------------------------ binary

struct AddF {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) + static_cast<Wrap<A>>(b));
    } else {
      return a + b;
    }
  }
};
struct SubF {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) - static_cast<Wrap<A>>(b));
    } else {
      return a - b;
    }
  }
};
struct MulF {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) * static_cast<Wrap<A>>(b));
    } else {
      return a * b;
    }
  }
};
struct DivF {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a / b; }
};
// C pow; a power of exactly 2 squares (exact, as cpu_eigen's `x ** 2`).
struct PowF {
  template <typename A>
  __device__ A operator()(A a, A b) const { return b == A(2) ? a * a : pow(a, b); }
};
// NumPy maximum/minimum: NaN propagates, ties (±0) give b.
struct MaximumF {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a > b ? a : b;
  }
};
struct MinimumF {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a < b ? a : b;
  }
};

}  // namespace fn
}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_OPS_CUH_
