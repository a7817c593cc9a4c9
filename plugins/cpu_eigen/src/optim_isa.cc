// The optimizer element loops of optim_isa.h (Adam).
//
// Built with the plugin's baseline flags like every src/*.cc (namespace
// cpu_eigen::optim_base), and again on x86-64 with -march=x86-64-v3 / -v4
// -DCPU_EIGEN_OPTIM_ISA=<isa> (namespace optim_<isa>); optim_isa.h picks the
// best build the CPU runs. Every build compiles with -fno-math-errno (so sqrt
// vectorises) and -ffp-contract=off (no fused multiply-add: the same bits
// at every width). Plain loops over independent elements, no library code
// (no Eigen, no std templates), so a build emits no symbol that could stand
// in for another build's: everything but the two tables has internal
// linkage.
#ifdef CPU_EIGEN_OPTIM_ISA
#define CPU_EIGEN_OPTIM_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_OPTIM_CAT_(a, b) CPU_EIGEN_OPTIM_CAT_INNER_(a, b)
#define CPU_EIGEN_OPTIM_NS CPU_EIGEN_OPTIM_CAT_(optim_, CPU_EIGEN_OPTIM_ISA)
#ifndef CPU_EIGEN_OPTIM_ISA_NAME
#define CPU_EIGEN_OPTIM_ISA_NAME "x86-64-isa"
#endif
#else
#define CPU_EIGEN_OPTIM_NS optim_base
#define CPU_EIGEN_OPTIM_ISA_NAME "baseline"
#endif

#include <cstdint>

#define CPU_EIGEN_OPTIM_TABLE_ONLY
#include "optim_isa.h"

namespace cpu_eigen {
namespace CPU_EIGEN_OPTIM_NS {
namespace {

inline float Sqrt(float x) { return __builtin_sqrtf(x); }
inline double Sqrt(double x) { return __builtin_sqrt(x); }

// The loop for one combination of the per-call switches (hoisted out of the
// loop so that each variant vectorises as a straight line).
template <typename T, bool kAms, bool kMax, bool kL2, bool kShrink>
void AdamLoop(const AdamParams<T>& a, const T* p, const T* g, const T* m,
              const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
              T* vmax_out, int64_t len) {
  const T b1 = a.b1, c1 = a.one_minus_b1, b2 = a.b2, c2 = a.one_minus_b2;
  const T l2 = a.l2, shrink = a.shrink, bc2 = a.bc2_sqrt, eps = a.eps;
  const T step = a.step_size;
  for (int64_t i = 0; i < len; ++i) {
    T d = kMax ? -g[i] : g[i];
    if (kL2) d = d + l2 * p[i];
    const T mi = b1 * m[i] + c1 * d;
    const T vi = b2 * v[i] + c2 * (d * d);
    T s = vi;
    if (kAms) {
      const T old = vmax[i];
      s = old < vi ? vi : old;
    }
    const T den = Sqrt(s) / bc2 + eps;
    const T pi = p[i];
    m_out[i] = mi;
    v_out[i] = vi;
    if (kAms) vmax_out[i] = s;
    p_out[i] = kShrink ? pi * shrink - step * (mi / den) : pi - step * (mi / den);
  }
}

template <typename T, bool kAms, bool kMax, bool kL2>
void AdamShrink(const AdamParams<T>& a, const T* p, const T* g, const T* m,
                const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
                T* vmax_out, int64_t len) {
  if (a.shrink != T(1)) {
    AdamLoop<T, kAms, kMax, kL2, true>(a, p, g, m, v, vmax, p_out, m_out,
                                       v_out, vmax_out, len);
  } else {
    AdamLoop<T, kAms, kMax, kL2, false>(a, p, g, m, v, vmax, p_out, m_out,
                                        v_out, vmax_out, len);
  }
}

template <typename T, bool kAms, bool kMax>
void AdamL2(const AdamParams<T>& a, const T* p, const T* g, const T* m,
            const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
            T* vmax_out, int64_t len) {
  if (a.l2 != T(0)) {
    AdamShrink<T, kAms, kMax, true>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                                    vmax_out, len);
  } else {
    AdamShrink<T, kAms, kMax, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                                     vmax_out, len);
  }
}

template <typename T>
void Adam(const AdamParams<T>& a, const T* p, const T* g, const T* m,
          const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
          T* vmax_out, int64_t len) {
  if (a.amsgrad) {
    if (a.maximize) {
      AdamL2<T, true, true>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                            vmax_out, len);
    } else {
      AdamL2<T, true, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                             vmax_out, len);
    }
  } else if (a.maximize) {
    AdamL2<T, false, true>(a, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out,
                           len);
  } else {
    AdamL2<T, false, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                            vmax_out, len);
  }
}

}  // namespace

extern const OptimKernels<float> kOptimKernelsF32;
extern const OptimKernels<double> kOptimKernelsF64;

const OptimKernels<float> kOptimKernelsF32 = {&Adam<float>,
                                              CPU_EIGEN_OPTIM_ISA_NAME};
const OptimKernels<double> kOptimKernelsF64 = {&Adam<double>,
                                               CPU_EIGEN_OPTIM_ISA_NAME};

}  // namespace CPU_EIGEN_OPTIM_NS
}  // namespace cpu_eigen
