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
#include "gelu_grad.h"

namespace cpu_eigen {
namespace CPU_EIGEN_EW_NS {
namespace {

// The functor of a unary kind, with its parameters (the table's Kernel
// column says how many: custom1 one, custom2 two, the others none).
template <int kParams, typename F, typename T>
inline F MakeUnaryOp(UnaryParams<T> p) {
  if constexpr (kParams == 2) {
    return F{p.p0, p.p1};
  } else if constexpr (kParams == 1) {
    return F{p.p0};
  } else {
    (void)p;
    return F{};
  }
}
constexpr int kParams_numeric = 0, kParams_float = 0, kParams_libm = 0,
              kParams_custom0 = 0, kParams_custom1 = 1, kParams_custom2 = 2;

// One case per row of the element-wise op table (dragon/elementwise.h).
template <typename T>
void Unary(UnaryKind kind, UnaryParams<T> p, const T* x, T* y, int64_t n) {
  switch (kind) {
#define CPU_EIGEN_EW_UNARY_CASE_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  case UnaryKind::k##Kind:                                                 \
    return UnaryRun<T, T>(                                                 \
        MakeUnaryOp<kParams_##Kernel, Kind##Op<T>>(p), x, y, n);
    DG_ELEMENTWISE_UNARY(CPU_EIGEN_EW_UNARY_CASE_)
#undef CPU_EIGEN_EW_UNARY_CASE_
  }
}

template <typename T>
void Binary(BinaryKind kind, BinaryForm form, const T* a, const T* b, T* y,
            int64_t n) {
  switch (kind) {
#define CPU_EIGEN_EW_BINARY_CASE_(Kind, Opcode, OpType, Cost) \
  case BinaryKind::k##Kind:                                   \
    return BinaryRun<T, T>(Kind##Op{}, form, a, b, y, n);
    DG_ELEMENTWISE_BINARY(CPU_EIGEN_EW_BINARY_CASE_)
#undef CPU_EIGEN_EW_BINARY_CASE_
  }
}

}  // namespace

// Constant-initialised (no code runs at load, whatever the CPU).
extern const FloatKernels<float> kFloatKernelsF32;
extern const FloatKernels<double> kFloatKernelsF64;
const FloatKernels<float> kFloatKernelsF32 = {
    &Unary<float>, &Binary<float>, CPU_EIGEN_EW_ISA_NAME, &GeluGradRun<float>,
    &BiasGeluRunF32, &GeluSlopeRowsF32};
const FloatKernels<double> kFloatKernelsF64 = {
    &Unary<double>, &Binary<double>, CPU_EIGEN_EW_ISA_NAME,
    &GeluGradRun<double>, nullptr, nullptr};

}  // namespace CPU_EIGEN_EW_NS
}  // namespace cpu_eigen
