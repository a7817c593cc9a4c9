// RoI attributes and validation shared by the CPU (roi.cc) and CUDA
// (cuda/roi.cu) kernels of RoiAlign and RoiPool; defined in roi.cc.
#pragma once

#include <cstdint>

#include "dragon/plugin.hpp"

namespace vision {

// The attributes of a RoI op, read once per call.
struct RoiAttrs {
  int64_t oh = 1, ow = 1;     // output bins per roi
  double scale = 1.0;         // spatial_scale
  int64_t sampling = -1;      // RoiAlign: samples per bin axis (<= 0: adaptive)
  bool aligned = true;        // RoiAlign: half-pixel shift
};

// Reads output_size, spatial_scale and (align) sampling_ratio, aligned.
RoiAttrs ReadRoiAttrs(const dg::KernelContext& ctx, bool align);

// Checks every roi of a host copy of `rois` [k, 5] against a batch of
// `batch` images: integral batch index in range, finite coordinates and,
// for RoiAlign, a bounded number of bilinear samples. Instantiated for
// float and double.
template <typename T>
void CheckRois(const T* rois, int64_t k, int64_t batch, const RoiAttrs& a,
               bool align);

}  // namespace vision
