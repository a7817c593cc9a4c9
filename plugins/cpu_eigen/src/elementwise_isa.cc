// The float (float, double) element-wise runs, as a table of two entry
// points (see FloatKernels in elementwise_ops.h).
//
// Built with the plugin's baseline flags like every src/*.cc (namespace
// cpu_eigen::ew_base), and optionally again per instruction set with
// -march=x86-64-<isa> -DCPU_EIGEN_EW_ISA=<isa> (namespace ew_<isa>, Eigen
// renamed to Eigen_ew_<isa>). Eigen's packet math is chosen at compile
// time, so only those builds use AVX2/FMA or AVX-512; elementwise.h picks
// the best one the CPU supports at first use. A build here must share no
// mangled name with another (see elementwise_ops.h): `nm -C` on its object
// lists weak symbols only in cpu_eigen::ew_<isa> and Eigen_ew_<isa>.
#ifdef CPU_EIGEN_EW_ISA
#define CPU_EIGEN_EW_ISA_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_EW_ISA_CAT_(a, b) CPU_EIGEN_EW_ISA_CAT_INNER_(a, b)
#define Eigen CPU_EIGEN_EW_ISA_CAT_(Eigen_ew_, CPU_EIGEN_EW_ISA)
#define CPU_EIGEN_EW_ISA_STR_INNER_(a) #a
#define CPU_EIGEN_EW_ISA_STR_(a) CPU_EIGEN_EW_ISA_STR_INNER_(a)
#ifndef CPU_EIGEN_EW_ISA_NAME
#define CPU_EIGEN_EW_ISA_NAME "x86-64-" CPU_EIGEN_EW_ISA_STR_(CPU_EIGEN_EW_ISA)
#endif
// GCC 12 reports (-Wmaybe-)uninitialized values inside its own AVX-512
// intrinsics (the `__Y = __Y` idiom) when Eigen inlines them: false
// positives in compiler headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#else
#define CPU_EIGEN_EW_ISA_NAME "baseline"
#endif

#include <cstdint>

#include "elementwise_ops.h"

namespace cpu_eigen {
namespace CPU_EIGEN_EW_NS {
namespace {

template <typename T>
void Unary(UnaryKind kind, UnaryParams<T> p, const T* x, T* y, int64_t n) {
  switch (kind) {
    case UnaryKind::kNeg: return UnaryRun<T, T>(NegOp<T>{}, x, y, n);
    case UnaryKind::kAbs: return UnaryRun<T, T>(AbsOp<T>{}, x, y, n);
    case UnaryKind::kSign: return UnaryRun<T, T>(SignOp<T>{}, x, y, n);
    case UnaryKind::kSquare: return UnaryRun<T, T>(SquareOp<T>{}, x, y, n);
    case UnaryKind::kReciprocal:
      return UnaryRun<T, T>(ReciprocalOp<T>{}, x, y, n);
    case UnaryKind::kSqrt: return UnaryRun<T, T>(SqrtOp<T>{}, x, y, n);
    case UnaryKind::kRsqrt: return UnaryRun<T, T>(RsqrtOp<T>{}, x, y, n);
    case UnaryKind::kExp: return UnaryRun<T, T>(ExpOp<T>{}, x, y, n);
    case UnaryKind::kLog: return UnaryRun<T, T>(LogOp<T>{}, x, y, n);
    case UnaryKind::kLog1p: return UnaryRun<T, T>(Log1pOp<T>{}, x, y, n);
    case UnaryKind::kSin: return UnaryRun<T, T>(SinOp<T>{}, x, y, n);
    case UnaryKind::kCos: return UnaryRun<T, T>(CosOp<T>{}, x, y, n);
    case UnaryKind::kTanh: return UnaryRun<T, T>(TanhOp<T>{}, x, y, n);
    case UnaryKind::kSigmoid: return UnaryRun<T, T>(SigmoidOp<T>{}, x, y, n);
    case UnaryKind::kRelu: return UnaryRun<T, T>(ReluOp<T>{}, x, y, n);
    case UnaryKind::kLeakyRelu:
      return UnaryRun<T, T>(LeakyReluOp<T>{p.p0}, x, y, n);
    case UnaryKind::kElu: return UnaryRun<T, T>(EluOp<T>{p.p0}, x, y, n);
    case UnaryKind::kGeluErf: return UnaryRun<T, T>(GeluErfOp<T>{}, x, y, n);
    case UnaryKind::kGeluTanh:
      return UnaryRun<T, T>(GeluTanhOp<T>{}, x, y, n);
    case UnaryKind::kSoftplus:
      return UnaryRun<T, T>(SoftplusOp<T>{p.p0, p.p1}, x, y, n);
    case UnaryKind::kClip:
      return UnaryRun<T, T>(ClipOp<T>{p.p0, p.p1}, x, y, n);
    case UnaryKind::kFloor: return UnaryRun<T, T>(FloorOp<T>{}, x, y, n);
    case UnaryKind::kCeil: return UnaryRun<T, T>(CeilOp<T>{}, x, y, n);
    case UnaryKind::kRound: return UnaryRun<T, T>(RoundOp<T>{}, x, y, n);
    case UnaryKind::kTan: return UnaryRun<T, T>(TanOp<T>{}, x, y, n);
    case UnaryKind::kAsin: return UnaryRun<T, T>(AsinOp<T>{}, x, y, n);
    case UnaryKind::kAcos: return UnaryRun<T, T>(AcosOp<T>{}, x, y, n);
    case UnaryKind::kAtan: return UnaryRun<T, T>(AtanOp<T>{}, x, y, n);
    case UnaryKind::kSinh: return UnaryRun<T, T>(SinhOp<T>{}, x, y, n);
    case UnaryKind::kCosh: return UnaryRun<T, T>(CoshOp<T>{}, x, y, n);
    case UnaryKind::kAsinh: return UnaryRun<T, T>(AsinhOp<T>{}, x, y, n);
    case UnaryKind::kAcosh: return UnaryRun<T, T>(AcoshOp<T>{}, x, y, n);
    case UnaryKind::kAtanh: return UnaryRun<T, T>(AtanhOp<T>{}, x, y, n);
    case UnaryKind::kErf: return UnaryRun<T, T>(ErfOp<T>{}, x, y, n);
  }
}

template <typename T>
void Binary(BinaryKind kind, BinaryForm form, const T* a, const T* b, T* y,
            int64_t n) {
  switch (kind) {
    case BinaryKind::kAdd: return BinaryRun<T, T>(AddOp{}, form, a, b, y, n);
    case BinaryKind::kSub: return BinaryRun<T, T>(SubOp{}, form, a, b, y, n);
    case BinaryKind::kMul: return BinaryRun<T, T>(MulOp{}, form, a, b, y, n);
    case BinaryKind::kDiv: return BinaryRun<T, T>(DivOp{}, form, a, b, y, n);
    case BinaryKind::kPow: return BinaryRun<T, T>(PowOp{}, form, a, b, y, n);
    case BinaryKind::kMaximum:
      return BinaryRun<T, T>(MaximumOp{}, form, a, b, y, n);
    case BinaryKind::kMinimum:
      return BinaryRun<T, T>(MinimumOp{}, form, a, b, y, n);
    case BinaryKind::kSquare:
      return BinaryRun<T, T>(SquareAOp{}, form, a, b, y, n);
    case BinaryKind::kFloorDivide:
      return BinaryRun<T, T>(FloorDivideOp{}, form, a, b, y, n);
    case BinaryKind::kMod: return BinaryRun<T, T>(ModOp{}, form, a, b, y, n);
    case BinaryKind::kFmod: return BinaryRun<T, T>(FmodOp{}, form, a, b, y, n);
  }
}

}  // namespace

// Constant-initialised (no code runs at load, whatever the CPU).
extern const FloatKernels<float> kFloatKernelsF32;
extern const FloatKernels<double> kFloatKernelsF64;
const FloatKernels<float> kFloatKernelsF32 = {&Unary<float>, &Binary<float>,
                                              CPU_EIGEN_EW_ISA_NAME};
const FloatKernels<double> kFloatKernelsF64 = {
    &Unary<double>, &Binary<double>, CPU_EIGEN_EW_ISA_NAME};

}  // namespace CPU_EIGEN_EW_NS
}  // namespace cpu_eigen
