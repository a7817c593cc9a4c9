// Byte-moving helpers shared by the shape and copy kernels.
//
// Shape ops never look at values: they move elements of 1, 2, 4 or 8 bytes.
// Everything here therefore works on element sizes, not dtypes, so a single
// kernel serves every dtype. Strides are in elements (as in DgTensorView);
// they may be zero (broadcast) or negative (reversed views).
#ifndef DRAGON_CPU_EIGEN_STRIDED_H_
#define DRAGON_CPU_EIGEN_STRIDED_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common.h"

namespace cpu_eigen {

template <size_t N>
using ElemSize = std::integral_constant<size_t, N>;

// Calls fn(ElemSize<N>{}) for an element size of 1, 2, 4 or 8 bytes.
template <typename Fn>
void DispatchElemSize(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      fn(ElemSize<1>{});
      return;
    case 2:
      fn(ElemSize<2>{});
      return;
    case 4:
      fn(ElemSize<4>{});
      return;
    case 8:
      fn(ElemSize<8>{});
      return;
    default:
      throw dg::Error(DG_INTERNAL,
                      dg::Str("unsupported element size ", size, " bytes"));
  }
}

// Copies one element of N bytes; memcpy keeps it free of alignment and
// aliasing assumptions and compiles to a single move.
template <size_t N>
inline void CopyElem(char* dst, const char* src) {
  std::memcpy(dst, src, N);
}

// memcpy, split across threads when the copy is large (> ~256 KiB).
inline void ParallelMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  constexpr int64_t kBlock = 64 << 10;
  const int64_t blocks = (static_cast<int64_t>(bytes) + kBlock - 1) / kBlock;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  ParallelFor(
      blocks,
      [&](int64_t b, int64_t e) {
        const size_t begin = static_cast<size_t>(b * kBlock);
        const size_t end = std::min(bytes, static_cast<size_t>(e * kBlock));
        std::memcpy(d + begin, s + begin, end - begin);
      },
      kParallelGrain / 4);
}

// Writes the element `value` (N bytes) to dst[0..n).
template <size_t N>
void FillRow(char* dst, int64_t n, const char* value) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * N, value, N);
}

// Sets n elements of `elem_size` bytes at dst to the element at `value`.
inline void FillElements(void* dst, int64_t n, const void* value,
                         size_t elem_size) {
  if (n <= 0) return;
  char* d = static_cast<char*>(dst);
  const char* v = static_cast<const char*>(value);
  bool uniform = true;  // all bytes equal: memset does it
  for (size_t i = 1; i < elem_size; ++i) uniform = uniform && v[i] == v[0];
  DispatchElemSize(elem_size, [&](auto size) {
    constexpr size_t N = decltype(size)::value;
    ParallelFor(n, [&](int64_t b, int64_t e) {
      if (uniform) {
        std::memset(d + b * N, v[0], static_cast<size_t>(e - b) * N);
      } else {
        FillRow<N>(d + b * N, e - b, v);
      }
    });
  });
}

// Highest rank StridedCopy handles (NumPy's limit as well).
constexpr int64_t kMaxDims = 64;

namespace internal {

// A copy problem after simplification: dims of size 1 dropped, neighbours
// that are contiguous in both source and destination merged.
struct CopyLayout {
  std::vector<int64_t> shape, src, dst;  // strides in elements
};

inline CopyLayout Simplify(int64_t ndim, const int64_t* shape,
                           const int64_t* src, const int64_t* dst) {
  CopyLayout l;
  for (int64_t i = 0; i < ndim; ++i) {
    if (shape[i] == 1) continue;
    if (!l.shape.empty() && l.src.back() == src[i] * shape[i] &&
        l.dst.back() == dst[i] * shape[i]) {
      l.shape.back() *= shape[i];
      l.src.back() = src[i];
      l.dst.back() = dst[i];
    } else {
      l.shape.push_back(shape[i]);
      l.src.push_back(src[i]);
      l.dst.push_back(dst[i]);
    }
  }
  return l;
}

// Byte offsets (source, destination) of the multi-index that `linear`
// denotes over `dims` (row-major), and that multi-index in `idx`.
inline void Unravel(int64_t linear, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& src_bytes,
                    const std::vector<int64_t>& dst_bytes, int64_t* idx,
                    int64_t* src_off, int64_t* dst_off) {
  *src_off = 0;
  *dst_off = 0;
  for (int64_t k = static_cast<int64_t>(dims.size()) - 1; k >= 0; --k) {
    const int64_t dim = dims[k];
    const int64_t i = linear % shape[dim];
    linear /= shape[dim];
    if (idx != nullptr) idx[k] = i;
    *src_off += i * src_bytes[dim];
    *dst_off += i * dst_bytes[dim];
  }
}

// Copies one row of n elements; steps in bytes.
template <size_t N>
inline void CopyRow(char* d, int64_t d_step, const char* s, int64_t s_step,
                    int64_t n) {
  if (d_step == static_cast<int64_t>(N)) {
    if (s_step == static_cast<int64_t>(N)) {
      std::memcpy(d, s, static_cast<size_t>(n) * N);
    } else if (s_step == 0) {
      FillRow<N>(d, n, s);
    } else {
      for (int64_t i = 0; i < n; ++i) CopyElem<N>(d + i * N, s + i * s_step);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) CopyElem<N>(d + i * d_step, s + i * s_step);
  }
}

// Generic path: one row per innermost dimension, rows walked with an
// odometer so each chunk pays the index division only once.
template <size_t N>
void CopyRows(const CopyLayout& l, const char* src, char* dst) {
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  const int64_t inner = l.shape[nd - 1];
  const int64_t s_step = l.src[nd - 1] * static_cast<int64_t>(N);
  const int64_t d_step = l.dst[nd - 1] * static_cast<int64_t>(N);
  std::vector<int64_t> outer_dims, src_bytes(nd), dst_bytes(nd);
  int64_t rows = 1;
  for (int64_t k = 0; k < nd; ++k) {
    src_bytes[k] = l.src[k] * static_cast<int64_t>(N);
    dst_bytes[k] = l.dst[k] * static_cast<int64_t>(N);
    if (k + 1 < nd) {
      outer_dims.push_back(k);
      rows *= l.shape[k];
    }
  }
  const int64_t no = nd - 1;
  if (rows < 4) {
    // Few long rows (e.g. a 1-D strided view): parallelise inside each row.
    for (int64_t r = 0; r < rows; ++r) {
      int64_t so = 0, dof = 0;
      Unravel(r, outer_dims, l.shape, src_bytes, dst_bytes, nullptr, &so, &dof);
      ParallelFor(inner, [&](int64_t begin, int64_t end) {
        CopyRow<N>(dst + dof + begin * d_step, d_step,
                   src + so + begin * s_step, s_step, end - begin);
      });
    }
    return;
  }
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        // No allocation here: nothing may throw inside a parallel region.
        int64_t idx[kMaxDims];
        int64_t so = 0, dof = 0;
        Unravel(begin, outer_dims, l.shape, src_bytes, dst_bytes, idx, &so,
                &dof);
        for (int64_t r = begin; r < end; ++r) {
          CopyRow<N>(dst + dof, d_step, src + so, s_step, inner);
          for (int64_t k = no - 1; k >= 0; --k) {
            so += src_bytes[k];
            dof += dst_bytes[k];
            if (++idx[k] < l.shape[k]) break;
            so -= src_bytes[k] * l.shape[k];
            dof -= dst_bytes[k] * l.shape[k];
            idx[k] = 0;
          }
        }
      },
      inner);
}

// One tile of the transposing copy: dst[jj * dj + ll * N] = src[jj * N +
// ll * sl] for jj in [j0, j1), ll in [l0, l1) (steps in bytes). The source
// is dense along jj, the destination along ll.
template <size_t N>
inline void CopyTile(char* dst, int64_t dj, const char* src, int64_t sl,
                     int64_t j0, int64_t j1, int64_t l0, int64_t l1) {
  constexpr int64_t n = static_cast<int64_t>(N);
  int64_t jj = j0;
#if defined(__SSE2__)
  if constexpr (N == 4) {
    // 4 x 4 blocks through registers: four 16-byte loads along jj, a
    // register transpose, four 16-byte stores along ll (the scalar loop
    // moves one 4-byte element per load and store). Only moves bits:
    // any 4-byte dtype, NaN payloads included, is copied exactly.
    for (; jj + 4 <= j1; jj += 4) {
      int64_t ll = l0;
      for (; ll + 4 <= l1; ll += 4) {
        const char* s = src + jj * n + ll * sl;
        __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s));
        __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + sl));
        __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * sl));
        __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * sl));
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        char* d = dst + jj * dj + ll * n;
        _mm_storeu_ps(reinterpret_cast<float*>(d), r0);
        _mm_storeu_ps(reinterpret_cast<float*>(d + dj), r1);
        _mm_storeu_ps(reinterpret_cast<float*>(d + 2 * dj), r2);
        _mm_storeu_ps(reinterpret_cast<float*>(d + 3 * dj), r3);
      }
      for (; ll < l1; ++ll)
        for (int64_t k = jj; k < jj + 4; ++k)
          CopyElem<N>(dst + k * dj + ll * n, src + k * n + ll * sl);
    }
  }
#endif
  for (; jj < j1; ++jj) {
    char* d = dst + jj * dj;
    const char* s = src + jj * n;
    for (int64_t ll = l0; ll < l1; ++ll) CopyElem<N>(d + ll * n, s + ll * sl);
  }
}

// The work items of a transposing copy over (j, last): each is a run of up
// to `tile` values of dim j by `span` values of the last dim, at source and
// destination offsets `so` / `dof` (in the units of the strides `src` /
// `dst` given) of the item's other dims. Calls
// fn(so, dof, j0, j1, span0, span1) for every item, in ParallelFor chunks of
// `grain` elements. Shared by CopyTiles and cpu_eigen's strided Cast.
template <typename Fn>
void ForEachTile(const CopyLayout& l, int64_t j, int64_t tile, int64_t span,
                 const std::vector<int64_t>& src, const std::vector<int64_t>& dst,
                 int64_t grain, Fn fn) {
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  const int64_t last = nd - 1;
  const int64_t nj = l.shape[j], nl = l.shape[last];
  std::vector<int64_t> others;
  int64_t outer = 1;
  for (int64_t k = 0; k < nd; ++k) {
    if (k != j && k != last) {
      others.push_back(k);
      outer *= l.shape[k];
    }
  }
  const int64_t j_tiles = (nj + tile - 1) / tile;
  const int64_t l_spans = (nl + span - 1) / span;
  const int64_t per_outer = j_tiles * l_spans;
  ParallelFor(
      outer * per_outer,
      [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          int64_t so = 0, dof = 0;
          Unravel(w / per_outer, others, l.shape, src, dst, nullptr, &so, &dof);
          const int64_t j0 = (w % per_outer) / l_spans * tile;
          const int64_t span0 = (w % l_spans) * span;
          fn(so, dof, j0, std::min(nj, j0 + tile), span0, std::min(nl, span0 + span));
        }
      },
      grain);
}

// Transposing path: the destination is dense along the last dim while the
// source is dense along dim `j`. Copy square tiles of (j, last) so that both
// the reads and the writes of a tile stay in L1.
template <size_t N>
void CopyTiles(const CopyLayout& l, int64_t j, const char* src, char* dst) {
  constexpr int64_t kTile = 32, kSpan = 64 * kTile;
  const int64_t nd = static_cast<int64_t>(l.shape.size());
  const int64_t nl = l.shape[nd - 1];
  const int64_t sl = l.src[nd - 1] * static_cast<int64_t>(N);
  const int64_t dj = l.dst[j] * static_cast<int64_t>(N);
  std::vector<int64_t> src_bytes(nd), dst_bytes(nd);
  for (int64_t k = 0; k < nd; ++k) {
    src_bytes[k] = l.src[k] * static_cast<int64_t>(N);
    dst_bytes[k] = l.dst[k] * static_cast<int64_t>(N);
  }
  ForEachTile(l, j, kTile, kSpan, src_bytes, dst_bytes, kTile * std::min(nl, kSpan),
              [&](int64_t so, int64_t dof, int64_t j0, int64_t j1, int64_t span0,
                  int64_t span1) {
                for (int64_t l0 = span0; l0 < span1; l0 += kTile) {
                  const int64_t l1 = std::min(span1, l0 + kTile);
                  CopyTile<N>(dst + dof, dj, src + so, sl, j0, j1, l0, l1);
                }
              });
}

}  // namespace internal

// Copies the `ndim`-dimensional block `shape` from src (element strides
// src_strides) to dst (element strides dst_strides). Pointers address the
// first element. Any strides are allowed on the source, including 0 and
// negative ones; destination elements must not overlap.
inline void StridedCopy(size_t elem_size, int64_t ndim, const int64_t* shape,
                        const void* src, const int64_t* src_strides, void* dst,
                        const int64_t* dst_strides) {
  DG_CHECK(ndim <= kMaxDims, DG_UNIMPLEMENTED, "strided copy of rank ", ndim,
           " (at most ", kMaxDims, " dimensions are supported)");
  for (int64_t i = 0; i < ndim; ++i)
    if (shape[i] == 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  internal::CopyLayout l =
      internal::Simplify(ndim, shape, src_strides, dst_strides);
  DispatchElemSize(elem_size, [&](auto size) {
    constexpr size_t N = decltype(size)::value;
    const int64_t nd = static_cast<int64_t>(l.shape.size());
    if (nd == 0) {  // a single element
      CopyElem<N>(d, s);
      return;
    }
    if (nd == 1 && l.src[0] == 1 && l.dst[0] == 1) {
      ParallelMemcpy(d, s, static_cast<size_t>(l.shape[0]) * N);
      return;
    }
    // A transpose: the source is dense along another dim. Tiles pay when
    // that dim is long; for a short one (e.g. 3 channels) the row path reads
    // the few interleaved streams from cache just as well.
    if (l.dst[nd - 1] == 1 && l.src[nd - 1] != 1 && l.src[nd - 1] != 0) {
      for (int64_t j = nd - 2; j >= 0; --j) {
        if (l.src[j] == 1 && l.shape[j] >= 8) {
          internal::CopyTiles<N>(l, j, s, d);
          return;
        }
      }
    }
    internal::CopyRows<N>(l, s, d);
  });
}

// Copies a tensor of `shape` with element strides `src_strides` into a dense
// row-major destination.
inline void StridedToDense(size_t elem_size, int64_t ndim, const int64_t* shape,
                           const void* src, const int64_t* src_strides,
                           void* dst) {
  std::vector<int64_t> dense =
      ContiguousStrides(std::vector<int64_t>(shape, shape + ndim));
  StridedCopy(elem_size, ndim, shape, src, src_strides, dst, dense.data());
}

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_STRIDED_H_
