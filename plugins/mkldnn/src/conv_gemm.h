// Convolutions on tiny feature maps as one GEMM (conv_gemm.cc): the
// im2col matrix of the image times the filter as a [O, C kh kw] matrix, on
// oneDNN's matmul primitive. conv.cc picks this path for a float32 call
// whose output map has at most kGemmMaxPixels pixels (see
// GemmConvServes()); docs/conv.md has the measurements.
#pragma once

#include <cstdint>

#include "common.h"

namespace mkldnn_plugin {

// A convolution in the forward direction: image x [n, c, h, w], filter
// [o, c, kh, kw], window (output) [n, o, oh, ow]; strides sh, sw, top and
// left padding ph, pw, no dilation, one group.
struct GemmConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw;
  int64_t pixels() const { return oh * ow; }
  int64_t rows() const { return n * oh * ow; }    // im2col rows (M)
  int64_t cols() const { return c * kh * kw; }    // im2col columns (K)
};

// Output maps of at most this many pixels (ResNet-18's last stage at 64 x
// 64 input: 2 x 2) take the GEMM path.
constexpr int64_t kGemmMaxPixels = 4;

// Whether the GEMM path serves a call of this geometry: a filter larger
// than 1 x 1 over an output map of at most kGemmMaxPixels pixels, and
// DRAGON_MKLDNN_CONV_GEMM is not 0 (the A/B switch, read once).
bool GemmConvServes(const GemmConvGeometry& g);

// Which product of a convolution a call computes.
enum class GemmConvKind { kForward, kBackwardData, kFilterGrad };

// Builds (and caches) the call's matmul primitive; false when oneDNN has no
// optimised one (supports() then declines the GEMM path's call).
bool GemmConvPrimitive(const DgCallFrame* f, const GemmConvGeometry& g,
                       GemmConvKind kind);

// Conv2d: x = input 0 [n, c, h, w], filter = input 1 [o, c, kh, kw],
// y = output 0 [n, o, oh, ow].
void GemmConvForward(const dg::KernelContext& ctx, const GemmConvGeometry& g);

// ConvTranspose2d as Conv2d's data gradient: dy = input 0 [n, o, oh, ow],
// filter = input 1 [o, c, kh, kw], dx = output 0 [n, c, h, w].
void GemmConvBackwardData(const dg::KernelContext& ctx,
                          const GemmConvGeometry& g);

// Conv2dBackpropFilter: x = input 0, dy = input 1, dw = output 0
// [o, c, kh, kw].
void GemmConvFilterGrad(const dg::KernelContext& ctx,
                        const GemmConvGeometry& g);

}  // namespace mkldnn_plugin
