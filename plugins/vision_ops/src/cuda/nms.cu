// CUDA kernels of Nms and BatchedNms (schemas, definition and CPU kernels
// in ../nms.cc), the usual bitmask scheme in three steps on the stream:
//
//  1. sort: keys are the scores with NaN mapped to -inf and -0 to +0, so
//     that a stable descending radix sort (cub) orders the boxes exactly
//     as the CPU kernel does (decreasing score, ties by index);
//  2. mask: for sorted boxes i < j, bit j of row i says that box i would
//     suppress box j (same category, IoU > threshold); one thread per row
//     and 64-column block, the block's boxes staged in shared memory;
//  3. select: one thread block walks the sorted boxes in order, keeps each
//     one not yet removed (and not NaN-scored) and ORs its row into the
//     removed set, its threads sharing the words of the row; then it pads
//     keep with -1 and writes num_kept.
//
// Memory: the mask takes N * ceil(N / 64) * 8 bytes of workspace (1.25 MB
// for 1,000 boxes, 125 MB for 10,000).
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda_common.cuh"

namespace vision {
namespace cuda {
namespace {

constexpr int kBlockBits = 64;

template <typename T>
__global__ void SortKeysKernel(int64_t n, const T* scores, T* keys,
                               int64_t* index) {
  VISION_CUDA_LOOP(i, n) {
    const T s = scores[i];
    keys[i] = isnan(s) ? -INFINITY : s + T(0);  // -0 + 0 is +0
    index[i] = i;
  }
}

// IoU(a, b) > thr for boxes (x1, y1, x2, y2), areas from clamped sides and
// IoU 0 when the union is not positive (the CPU kernel's rule).
template <typename T>
__device__ inline bool Suppresses(const T* a, const T* b, T thr) {
  const T aw = fmax(a[2] - a[0], T(0)), ah = fmax(a[3] - a[1], T(0));
  const T bw = fmax(b[2] - b[0], T(0)), bh = fmax(b[3] - b[1], T(0));
  const T iw = fmax(fmin(a[2], b[2]) - fmax(a[0], b[0]), T(0));
  const T ih = fmax(fmin(a[3], b[3]) - fmax(a[1], b[1]), T(0));
  const T inter = iw * ih;
  const T uni = aw * ah + bw * bh - inter;
  return uni > T(0) && inter / uni > thr;
}

// mask[row * blocks + col_block]: which boxes of column block col_block
// (sorted positions after `row`) the sorted box `row` suppresses.
template <typename T>
__global__ void MaskKernel(int64_t n, int64_t blocks, const T* boxes,
                           const int64_t* order, const int64_t* cats, T thr,
                           unsigned long long* mask) {
  const int64_t row_block = blockIdx.y, col_block = blockIdx.x;
  const int64_t col0 = col_block * kBlockBits;
  const int64_t cols = min(static_cast<int64_t>(kBlockBits), n - col0);
  __shared__ T tile[kBlockBits * 4];
  __shared__ int64_t tile_cat[kBlockBits];
  const int t = threadIdx.x;
  if (t < cols) {
    const int64_t b = order[col0 + t];
    for (int q = 0; q < 4; ++q) tile[4 * t + q] = boxes[4 * b + q];
    tile_cat[t] = cats ? cats[b] : 0;
  }
  __syncthreads();
  const int64_t row = row_block * kBlockBits + t;
  if (row >= n) return;
  unsigned long long bits = 0;
  if (col_block >= row_block) {
    const int64_t b = order[row];
    const T* box = boxes + 4 * b;
    const int64_t cat = cats ? cats[b] : 0;
    for (int64_t j = col_block == row_block ? t + 1 : 0; j < cols; ++j) {
      if (tile_cat[j] == cat && Suppresses(box, tile + 4 * j, thr)) {
        bits |= 1ull << j;
      }
    }
  }
  mask[row * blocks + col_block] = bits;
}

template <typename T>
__global__ void SelectKernel(int64_t n, int64_t blocks,
                             const unsigned long long* mask,
                             const int64_t* order, const T* scores,
                             unsigned long long* removed, int64_t* keep,
                             int64_t* num_kept) {
  __shared__ int keep_i;
  __shared__ int64_t count;
  const int t = threadIdx.x;
  if (t == 0) count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t == 0) {
      const int64_t b = order[i];
      const bool gone = (removed[i / kBlockBits] >> (i % kBlockBits)) & 1ull;
      keep_i = !gone && !isnan(scores[b]);
      if (keep_i) keep[count++] = b;
    }
    __syncthreads();
    if (keep_i) {
      const unsigned long long* row = mask + i * blocks;
      for (int64_t c = i / kBlockBits + t; c < blocks; c += blockDim.x) {
        removed[c] |= row[c];
      }
    }
    __syncthreads();
  }
  for (int64_t j = count + t; j < n; j += blockDim.x) keep[j] = -1;
  if (t == 0) *num_kept = count;
}

// The three steps; `cats` is null for Nms.
template <typename T>
void NmsCuda(dg::KernelContext& ctx, const int64_t* cats) {
  const cudaStream_t stream = Stream(ctx);
  const int64_t n = ctx.input(0).dim(0);
  int64_t* keep = ctx.output(0).data<int64_t>();
  int64_t* num_kept = ctx.output(1).data<int64_t>();
  if (n == 0) {
    Check(cudaMemsetAsync(num_kept, 0, sizeof(int64_t), stream),
          "writing num_kept");
    return;
  }
  DG_CHECK(n <= INT_MAX, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", n,
           " boxes are more than the CUDA kernel sorts (", INT_MAX, ")");
  const T* boxes = ctx.input(0).data<const T>();
  const T* scores = ctx.input(1).data<const T>();
  const int64_t blocks = (n + kBlockBits - 1) / kBlockBits;
  // The mask kernel's grid is blocks x blocks, and gridDim.y is at most
  // 65535: past that the launch would fail with an opaque CUDA error.
  DG_CHECK(blocks <= 65535, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", n,
           " boxes are more than the CUDA kernel handles (", 65535 * kBlockBits,
           ")");
  T* keys = ctx.workspace<T>(2 * n);
  int64_t* index = ctx.workspace<int64_t>(2 * n);
  SortKeysKernel<T><<<Blocks(n), kThreads, 0, stream>>>(n, scores, keys, index);
  Check(cudaGetLastError(), "NMS key kernel launch");
  size_t temp_bytes = 0;
  Check(cub::DeviceRadixSort::SortPairsDescending(
            nullptr, temp_bytes, keys, keys + n, index, index + n,
            static_cast<int>(n), 0, static_cast<int>(sizeof(T) * 8), stream),
        "sizing the NMS sort");
  void* temp = ctx.workspace<char>(temp_bytes);
  Check(cub::DeviceRadixSort::SortPairsDescending(
            temp, temp_bytes, keys, keys + n, index, index + n,
            static_cast<int>(n), 0, static_cast<int>(sizeof(T) * 8), stream),
        "sorting the NMS scores");
  const int64_t* order = index + n;
  auto* mask = ctx.workspace<unsigned long long>(n * blocks);
  auto* removed = ctx.workspace<unsigned long long>(blocks);
  Check(cudaMemsetAsync(removed, 0, blocks * sizeof(unsigned long long),
                        stream),
        "zeroing the NMS removed set");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(blocks));
  MaskKernel<T><<<grid, kBlockBits, 0, stream>>>(
      n, blocks, boxes, order, cats,
      static_cast<T>(ctx.f("iou_threshold")), mask);
  Check(cudaGetLastError(), "NMS mask kernel launch");
  SelectKernel<T><<<1, kThreads, 0, stream>>>(n, blocks, mask, order, scores,
                                              removed, keep, num_kept);
  Check(cudaGetLastError(), "NMS select kernel launch");
}

template <typename T>
void SingleNmsCuda(dg::KernelContext& ctx) {
  NmsCuda<T>(ctx, nullptr);
}

template <typename T>
void BatchedNmsCuda(dg::KernelContext& ctx) {
  NmsCuda<T>(ctx, ctx.input(2).data<const int64_t>());
}

}  // namespace

DG_KERNEL("Nms", "cuda", SingleNmsCuda, float, double);
DG_KERNEL("BatchedNms", "cuda", BatchedNmsCuda, float, double);

}  // namespace cuda
}  // namespace vision
