// Rules shared by cpu_eigen's batched GEMM front ends (matmul.cc's float32
// batched kernel, matmul_bf16.cc's AVX512-BF16 kernel): NumPy matmul's
// broadcast of the batch axes, the dense output they write, and the
// auto/all/off switch each reads from its environment variable.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dragon/plugin.hpp"

namespace cpu_eigen {

// The batch axes of an output from those of A and B, right-aligned and
// broadcast (an axis of 0 gives 0); false when they do not broadcast.
// `*batch` is the number of output items.
inline bool BroadcastBatchAxes(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               std::vector<int64_t>* out, int64_t* batch) {
  const size_t na = a.size(), nb_ = b.size(), nb = std::max(na, nb_);
  out->assign(nb, 1);
  *batch = 1;
  for (size_t i = 0; i < nb; ++i) {
    const int64_t da = i + na >= nb ? a[i + na - nb] : 1;
    const int64_t db = i + nb_ >= nb ? b[i + nb_ - nb] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = (da == 0 || db == 0) ? 0 : std::max(da, db);
    *batch *= (*out)[i];
  }
  return true;
}

// Whether `y` is dense row-major (axes of size 1 may have any stride) and
// holds exactly `elements` elements.
inline bool DenseWithElements(const DgTensorView* y, int64_t elements) {
  int64_t count = 1, expect = 1;
  for (int i = y->ndim - 1; i >= 0; --i) {
    if (y->shape[i] != 1 && y->strides[i] != expect) return false;
    expect *= y->shape[i];
    count *= y->shape[i];
  }
  return count == elements;
}

// A kernel's DRAGON_CPU_EIGEN_*_GEMM switch: "all" takes every call the
// kernel can compute (tests, benchmarks), "off" none; unset or "auto" the
// kernel's measured choice. Anything else warns and means auto.
enum class GemmPolicy { kAuto, kAll, kOff };

inline GemmPolicy ParseGemmPolicy(const char* env_name) {
  const char* v = std::getenv(env_name);
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return GemmPolicy::kAuto;
  if (std::strcmp(v, "all") == 0) return GemmPolicy::kAll;
  if (std::strcmp(v, "off") == 0) return GemmPolicy::kOff;
  std::fprintf(stderr, "[dragon warning] %s=%s is not auto, all or off; using auto\n",
               env_name, v);
  return GemmPolicy::kAuto;
}

}  // namespace cpu_eigen
