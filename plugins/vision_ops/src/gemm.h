// Dense products used by the DeformConv2d CPU kernels (deform_conv.cc);
// defined in gemm.cc for float and double. Row-major, multithreaded with
// ParallelFor (common.h).
#pragma once

#include <cstdint>

namespace vision {

// C[M, N] = (accumulate ? C : 0) + op(A) B, with B [K, N] and op(A) = A
// [M, K] or, with trans_a, A^T for A stored [K, M].
template <typename T>
void Gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const T* a,
          const T* b, bool accumulate, T* c);

// dst [cols, rows] = src [rows, cols]^T.
template <typename T>
void Transpose(int64_t rows, int64_t cols, const T* src, T* dst);

}  // namespace vision
