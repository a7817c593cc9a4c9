// Axis merging for the element-wise kernels with many operands (fused.cu),
// plain C++ so that host-side tests compile it without nvcc
// (plugins/cuda/tests/test_cuda_index_math.py).
#ifndef DRAGON_CUDA_MERGE_AXES_H_
#define DRAGON_CUDA_MERGE_AXES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dragon_cuda {

// Drops the size-1 axes of `shape` (row-major) and merges neighbouring axes
// that are contiguous for every operand (stride of the outer axis = stride
// of the inner one times its size), rewriting `shape` and each operand's
// `strides` in place: the same elements at the same offsets over fewer
// axes (a dense operand ends as one axis of stride 1), so a kernel forms
// each element's offsets with fewer divisions.
inline void MergeAxes(std::vector<int64_t>* shape, std::vector<std::vector<int64_t>>* strides) {
  std::vector<int64_t> sh;
  std::vector<std::vector<int64_t>> st(strides->size());
  for (size_t d = 0; d < shape->size(); ++d) {
    const int64_t size = (*shape)[d];
    if (size == 1) continue;
    bool merge = !sh.empty();
    for (size_t k = 0; k < st.size() && merge; ++k)
      merge = st[k].back() == (*strides)[k][d] * size;
    if (merge) {
      sh.back() *= size;
      for (size_t k = 0; k < st.size(); ++k) st[k].back() = (*strides)[k][d];
      continue;
    }
    sh.push_back(size);
    for (size_t k = 0; k < st.size(); ++k) st[k].push_back((*strides)[k][d]);
  }
  *shape = sh;
  *strides = st;
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_MERGE_AXES_H_
