// RoI attributes and validation shared by the CPU (roi.cc) and CUDA
// (cuda/roi.cu) kernels of RoiAlign and RoiPool; defined in roi_ops.cc.
#pragma once

#include <cmath>
#include <cstdint>

#include "dragon/plugin.hpp"

// Host and device (under nvcc), as in resample.h.
#ifndef VISION_HD
#ifdef __CUDACC__
#define VISION_HD __host__ __device__ inline
#else
#define VISION_HD inline
#endif
#endif

namespace vision {

// Limit on the bilinear samples of one RoiAlign roi, all bins together (an
// adaptive grid on a huge roi would otherwise run for hours and its
// sampling table would not fit in memory). CheckRois enforces it.
constexpr int64_t kMaxSamplesPerRoi = int64_t{1} << 22;

// The attributes of a RoI op, read once per call.
struct RoiAttrs {
  int64_t oh = 1, ow = 1;     // output bins per roi
  double scale = 1.0;         // spatial_scale
  int64_t sampling = -1;      // RoiAlign: samples per bin axis (<= 0: adaptive)
  bool aligned = true;        // RoiAlign: half-pixel shift
  bool max_mode = false;      // RoiAlign: mode "max" (ONNX) instead of "avg"
};

// Reads output_size, spatial_scale and (align) sampling_ratio, aligned,
// mode.
RoiAttrs ReadRoiAttrs(const dg::KernelContext& ctx, bool align);

// Checks every roi of a host copy of `rois` [k, 5] against a batch of
// `batch` images: integral batch index in range, finite coordinates and,
// for RoiAlign, a bounded number of bilinear samples. Instantiated for
// float and double.
template <typename T>
void CheckRois(const T* rois, int64_t k, int64_t batch, const RoiAttrs& a,
               bool align);

// Samples per bin along one axis of a RoiAlign roi of `size` pixels split
// into `bins`, at most 1e9. A NaN size (a float kernel's inf - inf on a roi
// whose double check passed) gives 0 samples, never a NaN cast to int64.
// Used by CheckRois and by the CPU and CUDA kernels alike.
VISION_HD int64_t GridSize(double size, int64_t bins, int64_t sampling) {
  if (sampling > 0) return sampling;
  const double g = ceil(size / static_cast<double>(bins));
  if (!(g > 0)) return 0;
  return g > 1e9 ? int64_t{1000000000} : static_cast<int64_t>(g);
}

}  // namespace vision
