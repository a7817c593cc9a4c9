// The element-wise op functors shared by the unary and binary kernels and
// FusedElementwise (so that a fused program computes exactly what the
// unfused ops compute). Each works on the arithmetic type A (float for the
// 16-bit floats) with cpu_eigen's semantics (elementwise_ops.h).
//
// Plain C++ apart from DGC_HD (__host__ DGC_HD under nvcc, nothing for a
// host compiler), so that the host-side tests (plugins/cuda/tests/
// test_cuda_fused_host.py) compile these very functors with the host
// compiler and check them against cpu_eigen where there is no GPU. On the
// device the unqualified math calls (sin(x), fmod(a, b), ...) are CUDA's
// overloads for A; on the host they are <cmath>'s, brought into this
// namespace below.
#ifndef DRAGON_CUDA_OPS_CUH_
#define DRAGON_CUDA_OPS_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#ifndef DGC_HD
#ifdef __CUDACC__
#define DGC_HD __host__ __device__
#else
#define DGC_HD
#endif
#endif

namespace dragon_cuda {
namespace fn {

#ifndef __CUDACC__
// The host compiler: <cmath>'s overloads for float and double (the global
// names are the double forms only).
using std::acos;
using std::acosh;
using std::asin;
using std::asinh;
using std::atan;
using std::atanh;
using std::ceil;
using std::copysign;
using std::cos;
using std::cosh;
using std::erf;
using std::erfc;
using std::exp;
using std::expm1;
using std::fabs;
using std::floor;
using std::fmod;
using std::isinf;
using std::isnan;
using std::log;
using std::log1p;
using std::nearbyint;
using std::pow;
using std::sin;
using std::sinh;
using std::sqrt;
using std::tan;
using std::tanh;
using std::trunc;
#endif

template <typename T>
DGC_HD inline bool IsNan(T x) {
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
  DGC_HD A operator()(A x) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(Wrap<A>{0} - static_cast<Wrap<A>>(x));
    } else {
      return -x;
    }
  }
};
struct AbsF {
  template <typename A>
  DGC_HD A operator()(A x) const {
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
  DGC_HD A operator()(A x) const {
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
  DGC_HD A operator()(A x) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(x) * static_cast<Wrap<A>>(x));
    } else {
      return x * x;
    }
  }
};
struct ReluF {  // NumPy maximum(x, 0): NaN propagates, relu(-0) = +0
  template <typename A>
  DGC_HD A operator()(A x) const { return x > A(0) || IsNan(x) ? x : A(0); }
};

#define DGC_FLOAT_FN(NAME, EXPR)                     \
  struct NAME {                                      \
    template <typename A>                            \
    DGC_HD A operator()(A x) const { return EXPR; } \
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
  DGC_HD A operator()(A x) const {
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
  DGC_HD A operator()(A x) const { return x > A(0) ? x : alpha * x; }
};

template <typename A>
struct EluF {
  A alpha;
  DGC_HD A operator()(A x) const { return x > A(0) ? x : alpha * expm1(x); }
};

// x·Φ(x) with Φ(x) = erfc(-x/√2)/2 (accurate for negative x); float in
// double, as cpu_eigen's scalar form.
struct GeluErfF {
  template <typename A>
  DGC_HD A operator()(A x) const {
    if (isinf(x) && x < A(0)) return A(-0.0);
    const double v = static_cast<double>(x);
    return static_cast<A>(0.5 * v * erfc(-0.70710678118654752440 * v));
  }
};
// x / (1 + e^(-2u)), u = √(2/π)(x + 0.044715x³).
struct GeluTanhF {
  template <typename A>
  DGC_HD A operator()(A x) const {
    const A c1 = A(-1.5957691216057307117), c3 = A(-0.071354816272600249);
    const A v = x * (c1 + c3 * x * x);  // -2u
    if (v <= A(0)) return x / (A(1) + exp(v));
    if (isinf(x)) return A(-0.0);
    const A e = exp(-v);
    return x * e / (A(1) + e);
  }
};

// The C library's functions (cpu_eigen's unary_math.cc and its libm rows of
// the op table): the 16-bit floats compute in float.
DGC_FLOAT_FN(TanF, tan(x))
DGC_FLOAT_FN(AsinF, asin(x))
DGC_FLOAT_FN(AcosF, acos(x))
DGC_FLOAT_FN(AtanF, atan(x))
DGC_FLOAT_FN(SinhF, sinh(x))
DGC_FLOAT_FN(CoshF, cosh(x))
DGC_FLOAT_FN(AsinhF, asinh(x))
DGC_FLOAT_FN(AcoshF, acosh(x))
DGC_FLOAT_FN(AtanhF, atanh(x))
DGC_FLOAT_FN(ErfF, erf(x))
DGC_FLOAT_FN(Expm1F, expm1(x))

// ------------------------------------------------------------ binary

struct AddF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) + static_cast<Wrap<A>>(b));
    } else {
      return a + b;
    }
  }
};
struct SubF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) - static_cast<Wrap<A>>(b));
    } else {
      return a - b;
    }
  }
};
struct MulF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<Wrap<A>>(a) * static_cast<Wrap<A>>(b));
    } else {
      return a * b;
    }
  }
};
struct DivF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const { return a / b; }
};
// C pow; a power of exactly 2 squares (exact, as cpu_eigen's `x ** 2`).
struct PowF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const { return b == A(2) ? a * a : pow(a, b); }
};
// NumPy maximum/minimum: NaN propagates, ties (±0) give b.
struct MaximumF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a > b ? a : b;
  }
};
struct MinimumF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if (IsNan(a) || IsNan(b)) return IsNan(a) ? a : b;
    return a < b ? a : b;
  }
};

// Division and remainder, as cpu_eigen's int_arith.cc (elementwise_ops.h:
// FloorDivideOp, TruncDivideOp, ModOp, FmodOp). Integers never trap: a zero
// divisor gives 0, and MIN / -1 wraps to MIN (remainder 0), NumPy's values.
// Floats follow NumPy's npy_divmod (floor_divide, remainder) and C's fmod;
// every step is exact or correctly rounded (fmod, floor, copysign, one
// division), so the device gives the CPU's bits.
struct FloorDivideF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_floating_point<A>::value) {
      if (b == A(0)) return a / b;
      const A mod = fmod(a, b);
      A div = (a - mod) / b;
      if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) div -= A(1);
      if (div != A(0)) {
        A floordiv = floor(div);
        if (div - floordiv > A(0.5)) floordiv += A(1);
        return floordiv;
      }
      return copysign(A(0), a / b);
    } else {
      if (b == A(0)) return A(0);
      if constexpr (std::is_signed<A>::value) {
        if (b == A(-1)) return NegF{}(a);  // MIN // -1 wraps
        const A q = static_cast<A>(a / b), r = static_cast<A>(a % b);
        return (r != A(0) && ((r < A(0)) != (b < A(0)))) ? static_cast<A>(q - 1) : q;
      } else {
        return static_cast<A>(a / b);
      }
    }
  }
};
struct TruncDivideF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_floating_point<A>::value) {
      return trunc(a / b);
    } else {
      if (b == A(0)) return A(0);
      if constexpr (std::is_signed<A>::value) {
        if (b == A(-1)) return NegF{}(a);
      }
      return static_cast<A>(a / b);
    }
  }
};
// NumPy's remainder: the sign of b (x % 0 is NaN for floats).
struct ModF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_floating_point<A>::value) {
      if (b == A(0)) return fmod(a, b);
      A mod = fmod(a, b);
      if (mod != A(0)) {
        if ((b < A(0)) != (mod < A(0))) mod += b;
      } else {
        mod = copysign(A(0), b);
      }
      return mod;
    } else {
      if (b == A(0)) return A(0);
      if constexpr (std::is_signed<A>::value) {
        if (b == A(-1)) return A(0);
        const A r = static_cast<A>(a % b);
        return (r != A(0) && ((r < A(0)) != (b < A(0)))) ? static_cast<A>(r + b) : r;
      } else {
        return static_cast<A>(a % b);
      }
    }
  }
};
// C's fmod: the sign of a.
struct FmodF {
  template <typename A>
  DGC_HD A operator()(A a, A b) const {
    if constexpr (std::is_floating_point<A>::value) {
      return fmod(a, b);
    } else {
      if (b == A(0)) return A(0);
      if constexpr (std::is_signed<A>::value) {
        if (b == A(-1)) return A(0);
      }
      return static_cast<A>(a % b);
    }
  }
};

}  // namespace fn
}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_OPS_CUH_
