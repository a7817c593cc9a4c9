// CUDA kernels of Nms and BatchedNms (schemas, definition and CPU kernels
// in ../nms.cc), the bitmask scheme in four steps on the stream, with no
// host synchronisation (the Python nms() reads num_kept once, to slice):
//
//  1. sort: keys are the scores with NaN mapped to -inf and -0 to +0, so
//     that a stable descending radix sort (cub) orders the boxes exactly
//     as the CPU kernel does (decreasing score, ties by index);
//  2. gather: the boxes, their areas and categories in sorted order
//     (contiguous for the mask kernel), and one bit per sorted box whose
//     score is NaN (such a box starts out removed: never kept, suppresses
//     nothing);
//  3. mask: for sorted boxes i < j, bit j % 64 of word (i, j / 64) says
//     that box i would suppress box j (same category, IoU > threshold);
//     one thread per row and 64-column tile at or right of the diagonal,
//     the tile's boxes staged in shared memory (words left of the diagonal
//     are never read, so never written);
//  4. select: one thread block walks the 64-box tiles in order. Thread 0
//     resolves a tile from its diagonal words (a register loop over the
//     boxes not yet removed whose diagonal word is non-zero), the warps
//     then OR the kept boxes' rows into the removed words of the later
//     tiles (warp w takes the kept boxes at bits w, w + 32 of the tile,
//     lanes over the words, shared-memory atomicOr) while the next tile's diagonal words load, and warp 0
//     writes the kept indices. Finally keep is padded with -1 and num_kept
//     written.
//
// IoUs use the CPU kernel's expression with every product and sum rounded
// on its own (no contraction into fused multiply-adds) and std::min/max's
// NaN rule, so the kept set is the CPU's bit for bit. The result does not
// depend on thread scheduling (the OR of a word is order-independent).
//
// Memory: the mask takes N * ceil(N / 64) * 8 bytes of workspace (3.2 MB
// for 5,000 boxes, 125 MB for 10,000).
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda_common.cuh"

namespace vision {
namespace cuda {
namespace {

using Word = unsigned long long;
constexpr int kBlockBits = 64;
constexpr int kSelectThreads = 1024;
// The select kernel keeps the removed words in shared memory up to this
// many bytes (under the default 48 KB of a block, with its static shared
// memory), in workspace beyond (more than 327,680 boxes).
constexpr int64_t kSelectSharedBytes = 40 * 1024;

template <typename T>
__global__ void SortKeysKernel(int n, const T* scores, T* keys,
                               int64_t* index) {
  VISION_CUDA_LOOP(i, n) {
    const T s = scores[i];
    keys[i] = isnan(s) ? -INFINITY : s + T(0);  // -0 + 0 is +0
    index[i] = i;
  }
}

// Sorted position i: its box (x1, y1, x2, y2), area (the CPU's LoadBox),
// category, and the NaN-score bits, 32 per warp (the grid covers the 64-box
// tiles whole, so every lane of a warp reaches the ballot).
template <typename T>
__global__ void SortedGatherKernel(int n, int tiles, const T* boxes,
                             const T* scores, const int64_t* cats,
                             const int64_t* order, T* sboxes, T* sarea,
                             int64_t* scats, unsigned* nan_bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  bool dead = false;
  if (i < n) {
    const int64_t b = order[i];
    const T x1 = boxes[4 * b], y1 = boxes[4 * b + 1];
    const T x2 = boxes[4 * b + 2], y2 = boxes[4 * b + 3];
    sboxes[4 * i] = x1;
    sboxes[4 * i + 1] = y1;
    sboxes[4 * i + 2] = x2;
    sboxes[4 * i + 3] = y2;
    sarea[i] = Mul(StdMax(Sub(x2, x1), T(0)), StdMax(Sub(y2, y1), T(0)));
    scats[i] = cats ? cats[b] : 0;
    dead = isnan(scores[b]);
  }
  const unsigned bits = __ballot_sync(0xffffffffu, dead);
  if ((threadIdx.x & 31) == 0 && i < tiles * kBlockBits) nan_bits[i / 32] = bits;
}

// IoU(a, b) > thr with the CPU's Overlaps: IoU 0 when the union is not
// positive, NaN (no suppression) from a NaN coordinate.
template <typename T>
__device__ inline bool Suppresses(const T* a, T a_area, const T* b, T b_area,
                                  T thr) {
  const T iw = StdMax(Sub(StdMin(a[2], b[2]), StdMax(a[0], b[0])), T(0));
  const T ih = StdMax(Sub(StdMin(a[3], b[3]), StdMax(a[1], b[1])), T(0));
  const T inter = Mul(iw, ih);
  const T uni = Sub(Add(a_area, b_area), inter);
  return uni > T(0) && Div(inter, uni) > thr;
}

// mask[row * tiles + col_tile] for col_tile >= row's tile: which boxes of
// column tile col_tile (sorted positions after `row`) sorted box `row`
// suppresses.
template <typename T>
__global__ void MaskKernel(int n, int tiles, const T* sboxes, const T* sarea,
                           const int64_t* scats, T thr, Word* mask) {
  const int row_tile = blockIdx.y, col_tile = blockIdx.x;
  if (col_tile < row_tile) return;  // the whole block: never read
  const int col0 = col_tile * kBlockBits;
  const int cols = min(kBlockBits, n - col0);
  __shared__ T tile[kBlockBits * 4];
  __shared__ T tile_area[kBlockBits];
  __shared__ int64_t tile_cat[kBlockBits];
  const int t = threadIdx.x;
  if (t < cols) {
    for (int q = 0; q < 4; ++q) tile[4 * t + q] = sboxes[4 * (col0 + t) + q];
    tile_area[t] = sarea[col0 + t];
    tile_cat[t] = scats[col0 + t];
  }
  __syncthreads();
  const int row = row_tile * kBlockBits + t;
  if (row >= n) return;
  T box[4];
  for (int q = 0; q < 4; ++q) box[q] = sboxes[4 * row + q];
  const T area = sarea[row];
  const int64_t cat = scats[row];
  Word bits = 0;
  for (int j = col_tile == row_tile ? t + 1 : 0; j < cols; ++j) {
    if (tile_cat[j] == cat &&
        Suppresses(box, area, tile + 4 * j, tile_area[j], thr)) {
      bits |= Word{1} << j;
    }
  }
  mask[static_cast<int64_t>(row) * tiles + col_tile] = bits;
}

// The greedy walk (see the file comment). `removed_ws` holds the removed
// words when they do not fit in shared memory (null otherwise).
//
// Per tile: thread 0 resolves the tile (only boxes whose diagonal word is
// non-zero can remove a later box of the tile, so it visits just those in
// order); the warps OR the kept boxes' rows into the later words while
// warps 0-1 fetch the next tile's diagonal words.
__global__ void __launch_bounds__(kSelectThreads)
SelectKernel(int n, int tiles, const Word* mask, const unsigned* nan_bits,
             const int64_t* order, Word* removed_ws, int64_t* keep, int64_t* num_kept) {
  extern __shared__ Word removed_sh[];
  __shared__ Word diag[kBlockBits];
  __shared__ unsigned nonzero[2];  // bit b % 32 of [b / 32]: diag[b] != 0
  __shared__ Word kept_sh;
  Word* removed = removed_ws ? removed_ws : removed_sh;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int warps = blockDim.x >> 5;
  for (int c = t; c < tiles; c += blockDim.x) {
    removed[c] = Word{nan_bits[2 * c]} | (Word{nan_bits[2 * c + 1]} << 32);
  }
  // Tile `tile`'s diagonal word of box t (threads 0-63, whole warps).
  auto diag_word = [&](int tile) -> Word {
    const int row = tile * kBlockBits + t;
    return row < n ? mask[static_cast<int64_t>(row) * tiles + tile] : Word{0};
  };
  auto store_diag = [&](Word d) {
    diag[t] = d;
    const unsigned nz = __ballot_sync(0xffffffffu, d != 0);
    if (lane == 0) nonzero[warp] = nz;
  };
  if (t < kBlockBits) store_diag(diag_word(0));
  int count = 0;  // kept so far; every thread keeps the same count
  __syncthreads();
  for (int tile = 0; tile < tiles; ++tile) {
    const int base = tile * kBlockBits;
    const int cols = min(kBlockBits, n - base);
    if (t == 0) {
      const Word valid = cols == kBlockBits ? ~Word{0} : (Word{1} << cols) - 1;
      const Word nz = Word{nonzero[0]} | (Word{nonzero[1]} << 32);
      Word gone = removed[tile];
      Word todo = ~gone & valid & nz;
      while (todo) {  // b is kept: it removes its diagonal bits (all above b)
        const int b = __ffsll(static_cast<long long>(todo)) - 1;
        gone |= diag[b];
        todo = ~gone & valid & nz & ((~Word{0} << b) << 1);
      }
      kept_sh = ~gone & valid;
    }
    __syncthreads();
    const Word kept = kept_sh;
    const bool more = tile + 1 < tiles;
    Word next = 0;  // the next tile's diagonal word, in flight meanwhile
    if (more && t < kBlockBits) next = diag_word(tile + 1);
    if (warp == 0) {
      for (int b = lane; b < cols; b += 32) {
        if ((kept >> b) & 1) {
          const Word below = b == 0 ? Word{0} : kept & ((Word{1} << b) - 1);
          keep[count + __popcll(below)] = order[base + b];
        }
      }
    }
    if (more) {
      // Warp w takes the kept boxes at bits w, w + warps, ... of the tile
      // (two bits per warp with 32 warps: a few checks, no scan of the
      // whole word per thread).
      for (int b = warp; b < cols; b += warps) {
        if (!((kept >> b) & 1)) continue;
        const Word* row = mask + static_cast<int64_t>(base + b) * tiles;
        for (int c = tile + 1 + lane; c < tiles; c += 32) {
          const Word m = row[c];
          if (m) atomicOr(removed + c, m);
        }
      }
      if (t < kBlockBits) store_diag(next);
    }
    count += __popcll(kept);
    __syncthreads();
  }
  for (int j = count + t; j < n; j += blockDim.x) keep[j] = -1;
  if (t == 0) *num_kept = count;
}

// The four steps; `cats` is null for Nms.
template <typename T>
void NmsCuda(dg::KernelContext& ctx, const int64_t* cats) {
  const cudaStream_t stream = Stream(ctx);
  const int64_t n64 = ctx.input(0).dim(0);
  int64_t* keep = ctx.output(0).data<int64_t>();
  int64_t* num_kept = ctx.output(1).data<int64_t>();
  if (n64 == 0) {
    Check(cudaMemsetAsync(num_kept, 0, sizeof(int64_t), stream),
          "writing num_kept");
    return;
  }
  const int64_t tiles64 = (n64 + kBlockBits - 1) / kBlockBits;
  // The mask kernel's grid is tiles x tiles, and gridDim.y is at most
  // 65535: past that the launch would fail with an opaque CUDA error.
  DG_CHECK(tiles64 <= 65535, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", n64,
           " boxes are more than the CUDA kernel handles (", 65535 * kBlockBits,
           ")");
  const int n = static_cast<int>(n64), tiles = static_cast<int>(tiles64);
  const T* boxes = ctx.input(0).data<const T>();
  const T* scores = ctx.input(1).data<const T>();
  // One workspace for every buffer (one allocation per call), each at a
  // 256-byte boundary.
  size_t temp_bytes = 0;
  Check(cub::DeviceRadixSort::SortPairsDescending(
            nullptr, temp_bytes, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
            static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0,
            static_cast<int>(sizeof(T) * 8), stream),
        "sizing the NMS sort");
  const bool removed_in_shared =
      tiles64 * static_cast<int64_t>(sizeof(Word)) <= kSelectSharedBytes;
  size_t size = 0;
  auto take = [&size](size_t bytes) {
    const size_t at = (size + 255) / 256 * 256;
    size = at + bytes;
    return at;
  };
  const size_t at_keys = take(2 * n64 * sizeof(T));
  const size_t at_index = take(2 * n64 * sizeof(int64_t));
  const size_t at_temp = take(temp_bytes);
  const size_t at_sboxes = take(4 * n64 * sizeof(T));
  const size_t at_sarea = take(n64 * sizeof(T));
  const size_t at_scats = take(n64 * sizeof(int64_t));
  const size_t at_nan = take(2 * tiles64 * sizeof(unsigned));
  const size_t at_mask = take(static_cast<size_t>(n64 * tiles64) * sizeof(Word));
  const size_t at_removed = take(removed_in_shared ? 0 : tiles64 * sizeof(Word));
  char* ws = ctx.workspace<char>(size);
  T* keys = reinterpret_cast<T*>(ws + at_keys);
  int64_t* index = reinterpret_cast<int64_t*>(ws + at_index);
  SortKeysKernel<T><<<Blocks(n64), kThreads, 0, stream>>>(n, scores, keys, index);
  Check(cudaGetLastError(), "NMS key kernel launch");
  void* temp = ws + at_temp;
  Check(cub::DeviceRadixSort::SortPairsDescending(
            temp, temp_bytes, keys, keys + n, index, index + n, n, 0,
            static_cast<int>(sizeof(T) * 8), stream),
        "sorting the NMS scores");
  const int64_t* order = index + n;

  T* sboxes = reinterpret_cast<T*>(ws + at_sboxes);
  T* sarea = reinterpret_cast<T*>(ws + at_sarea);
  int64_t* scats = reinterpret_cast<int64_t*>(ws + at_scats);
  unsigned* nan_bits = reinterpret_cast<unsigned*>(ws + at_nan);
  const int64_t gather_threads = tiles64 * kBlockBits;
  SortedGatherKernel<T><<<static_cast<unsigned>((gather_threads + kThreads - 1) / kThreads),
                    kThreads, 0, stream>>>(n, tiles, boxes, scores, cats, order,
                                           sboxes, sarea, scats, nan_bits);
  Check(cudaGetLastError(), "NMS gather kernel launch");

  Word* mask = reinterpret_cast<Word*>(ws + at_mask);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(tiles));
  MaskKernel<T><<<grid, kBlockBits, 0, stream>>>(
      n, tiles, sboxes, sarea, scats, static_cast<T>(ctx.f("iou_threshold")),
      mask);
  Check(cudaGetLastError(), "NMS mask kernel launch");

  Word* removed_ws = removed_in_shared ? nullptr : reinterpret_cast<Word*>(ws + at_removed);
  const size_t shared = removed_in_shared ? tiles64 * sizeof(Word) : 0;
  SelectKernel<<<1, kSelectThreads, shared, stream>>>(
      n, tiles, mask, nan_bits, order, removed_ws, keep, num_kept);
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
