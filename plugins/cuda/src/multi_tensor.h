// The chunk math of the cuda plugin's multi-tensor optimizer kernels
// (optim.cu), plain C++ so that host-side tests compile it without nvcc
// (plugins/cuda/tests/test_cuda_host_math.py): each parameter's elements
// are cut into chunks of kChunk, chunks are numbered parameter after
// parameter, and a block finds the parameter of its chunk by binary search
// over the parameters' first chunks.
#ifndef DRAGON_CUDA_MULTI_TENSOR_H_
#define DRAGON_CUDA_MULTI_TENSOR_H_

#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define DGC_HOST_DEVICE __host__ __device__
#else
#define DGC_HOST_DEVICE
#endif

namespace dragon_cuda {

// Elements per chunk (one block's share of a parameter).
constexpr int64_t kChunk = 8192;

// Sets each slot's first_chunk from the slots' element counts `n` (a
// parameter with no elements has no chunk) and returns the total.
template <typename SlotT>
int64_t AssignChunks(std::vector<SlotT>* slots) {
  int64_t total = 0;
  for (SlotT& s : *slots) {
    s.first_chunk = total;
    total += (s.n + kChunk - 1) / kChunk;
  }
  return total;
}

// The slot holding chunk `chunk` (0 <= chunk < total, count >= 1): the last
// slot whose first chunk is <= chunk, which skips empty parameters (they
// share their first chunk with the next one).
template <typename SlotT>
DGC_HOST_DEVICE inline int32_t FindSlot(const SlotT* slots, int32_t count, int64_t chunk) {
  int32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (slots[mid].first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Blocks for `chunks` chunks (one each; the kernels loop past the cap).
inline unsigned ChunkBlocks(int64_t chunks) {
  const int64_t cap = int64_t{1} << 20;
  return static_cast<unsigned>(chunks < 1 ? 1 : (chunks < cap ? chunks : cap));
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_MULTI_TENSOR_H_
