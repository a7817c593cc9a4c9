// Exact int32 GEMM (int_gemm.h): a blocked loop over rows of C, each row
// accumulated in uint32 (wrapping) from rows of op(B) packed row-major.
#include "int_gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.h"

namespace cpu_eigen {

void IntGemm(const GemmCall<int32_t>& call) {
  const int64_t n = call.n, m = call.m, k = call.k;
  if (call.batch <= 0 || n <= 0 || m <= 0) return;
  ParallelFor(
      call.batch * n,
      [&](int64_t begin, int64_t end) {
        std::vector<uint32_t> acc(static_cast<size_t>(m));
        for (int64_t q = begin; q < end; ++q) {
          const int64_t t = q / n, i = q % n;
          const int32_t* a = call.a + (call.a_offsets ? call.a_offsets[t] : 0);
          const int32_t* b = call.b + (call.b_offsets ? call.b_offsets[t] : 0);
          std::fill(acc.begin(), acc.end(), uint32_t{0});
          for (int64_t p = 0; p < k; ++p) {
            // op(A)[i, p] and op(B)[p, j] from their row-major storage.
            const uint32_t x = static_cast<uint32_t>(
                call.trans_a ? a[p * call.lda + i] : a[i * call.lda + p]);
            if (call.trans_b) {
              for (int64_t j = 0; j < m; ++j)
                acc[j] += x * static_cast<uint32_t>(b[j * call.ldb + p]);
            } else {
              const int32_t* brow = b + p * call.ldb;
              for (int64_t j = 0; j < m; ++j)
                acc[j] += x * static_cast<uint32_t>(brow[j]);
            }
          }
          int32_t* c = call.c + t * call.c_stride + i * call.ldc;
          for (int64_t j = 0; j < m; ++j) c[j] = static_cast<int32_t>(acc[j]);
        }
      },
      k * m);
}

}  // namespace cpu_eigen
