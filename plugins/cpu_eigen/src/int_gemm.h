// Exact int32 GEMM for the integer kernels of Conv2d / ConvTranspose2d /
// Conv2dBackpropFilter (quantized ops, ONNX ConvInteger). Same GemmCall
// contract as src/gemm/ (gemm/gemm.h), whose builds serve float and double.
#ifndef DRAGON_CPU_EIGEN_INT_GEMM_H_
#define DRAGON_CPU_EIGEN_INT_GEMM_H_

#include <cstdint>

#include "gemm/gemm.h"

namespace cpu_eigen {

// C[i] = op(A[i]) * op(B[i]) with two's-complement wrap-around: products
// and sums are taken modulo 2^32 (uint32 arithmetic), which is the exact
// int32 result of the exact integer sum, whatever the magnitudes.
void IntGemm(const GemmCall<int32_t>& call);

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_INT_GEMM_H_
