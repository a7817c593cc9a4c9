// Region-of-interest pooling over NCHW feature maps: RoiAlign (Mask R-CNN),
// RoiPool (Fast R-CNN), and the ops their gradients are written with
// (RoiAlignGrad, RoiPoolGrad, RoiPoolGather). This file holds what both
// devices share: the schemas, the shape rules and the host-side reading and
// validation of the attributes and rois (ReadRoiAttrs, CheckRois, declared
// in roi.h). The CPU kernels are in roi.cc, the CUDA kernels in cuda/roi.cu.
//
// A roi is a row (batch_index, x1, y1, x2, y2) in input-image coordinates;
// spatial_scale maps it onto the feature map. Every roi is validated before
// any kernel loop starts (the batch index must be an integer in [0, N), the
// coordinates finite), so a bad roi is a clear error, never a wild read.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "roi.h"

namespace vision {

namespace {

constexpr const char* kX = "Feature map, [N, C, H, W].";
constexpr const char* kRois =
    "Regions, [K, 5]: (batch_index, x1, y1, x2, y2) per row, in input "
    "coordinates (multiplied by spatial_scale); x's dtype.";
constexpr const char* kOutSize =
    "Bins per roi [oh, ow] (one value: both).";
constexpr const char* kScale =
    "Factor from roi coordinates to feature-map pixels (1/stride).";
constexpr const char* kSampling =
    "Bilinear samples per bin along each axis; <= 0 means adaptive: "
    "ceil(roi_size / output_size) per axis.";
constexpr const char* kAligned =
    "Shift the roi by -0.5 pixel so that pixel centres sit at integer + 0.5 "
    "(Detectron2); False is the legacy Mask R-CNN form (roi size >= 1).";
constexpr const char* kMode =
    "avg (the mean of the bin's bilinear samples) or max (ONNX RoiAlign's "
    "max mode: the largest of the bin's weighted bilinear corner terms "
    "w_k * x[corner_k], each sample contributing the largest of its 4 "
    "terms, as onnxruntime and the ONNX reference compute it).";
constexpr const char* kDy = "Gradient of the pooled output, [K, C, oh, ow].";
constexpr int64_t kMaxSamplingRatio = 2048;

using Shape = std::vector<int64_t>;

// ------------------------------------------------------------ shape rules

// output_size as [oh, ow]; validated.
Shape OutputSize(const dg::AttrReader& ctx) {
  Shape o = ctx.ints("output_size");
  DG_CHECK(o.size() == 1 || o.size() == 2, DG_INVALID_ARGUMENT,
           "output_size ", ShapeStr(o), " must hold 1 or 2 values");
  if (o.size() == 1) o.push_back(o[0]);
  DG_CHECK(o[0] > 0 && o[1] > 0 && o[0] <= (1 << 20) && o[1] <= (1 << 20),
           DG_INVALID_ARGUMENT, "output_size ", ShapeStr(o),
           " must be positive (and at most 2^20)");
  return o;
}

// Checks x [N, C, H, W], rois [K, 5] and the attributes; returns the pooled
// shape [K, C, oh, ow].
Shape PooledShape(const dg::InferContext& ctx, bool align) {
  const Shape x = ctx.input(0).shape(), r = ctx.input(1).shape();
  DG_CHECK(x.size() == 4, DG_INVALID_ARGUMENT,
           "x must be 4-D [N, C, H, W], got shape ", ShapeStr(x));
  DG_CHECK(x[2] > 0 && x[3] > 0, DG_INVALID_ARGUMENT, "x shape ", ShapeStr(x),
           " has an empty spatial axis; RoI pooling needs H, W >= 1");
  DG_CHECK(r.size() == 2 && r[1] == 5, DG_INVALID_ARGUMENT,
           "rois must be [K, 5] (batch_index, x1, y1, x2, y2), got shape ",
           ShapeStr(r));
  DG_CHECK(ctx.input(1).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           "rois must have x's dtype ", dg::DTypeName(ctx.input(0).dtype()),
           ", got ", dg::DTypeName(ctx.input(1).dtype()));
  const double scale = ctx.f("spatial_scale");
  DG_CHECK(std::isfinite(scale) && scale > 0, DG_INVALID_ARGUMENT,
           "spatial_scale must be a positive finite number, got ", scale);
  if (align) {
    const int64_t s = ctx.i("sampling_ratio");
    DG_CHECK(s <= kMaxSamplingRatio, DG_INVALID_ARGUMENT, "sampling_ratio ", s,
             " is larger than ", kMaxSamplingRatio);
    const std::string mode = ctx.s("mode");
    DG_CHECK(mode == "avg" || mode == "max", DG_INVALID_ARGUMENT,
             "unknown mode '", mode, "'; expected avg or max");
  }
  const Shape o = OutputSize(ctx);
  return {r[0], x[1], o[0], o[1]};
}

void SameAsX(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}

void PoolShape(dg::InferContext& ctx, bool align) {
  ctx.set_output(0, ctx.input(0).dtype(), PooledShape(ctx, align));
}

void RoiAlignShape(dg::InferContext& ctx) { PoolShape(ctx, true); }
void RoiPoolShape(dg::InferContext& ctx) { PoolShape(ctx, false); }

// Checks the third input (`name`) of a helper op: x's dtype and `want`.
void CheckThird(const dg::InferContext& ctx, const char* name,
                const Shape& want, const char* what) {
  const Shape got = ctx.input(2).shape();
  DG_CHECK(got == want, DG_INVALID_ARGUMENT, name, " has shape ",
           ShapeStr(got), " but must have ", what, " ", ShapeStr(want),
           " (x ", ShapeStr(ctx.input(0).shape()), ", rois ",
           ShapeStr(ctx.input(1).shape()), ")");
  DG_CHECK(ctx.input(2).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           name, " must have x's dtype ", dg::DTypeName(ctx.input(0).dtype()),
           ", got ", dg::DTypeName(ctx.input(2).dtype()));
}

// A gradient op (x, rois, dy [K, C, oh, ow]) -> dx, x's shape.
void GradShape(dg::InferContext& ctx, bool align) {
  CheckThird(ctx, "dy", PooledShape(ctx, align), "the pooled shape");
  SameAsX(ctx);
}

void RoiAlignGradShape(dg::InferContext& ctx) { GradShape(ctx, true); }
void RoiPoolGradShape(dg::InferContext& ctx) { GradShape(ctx, false); }

void RoiPoolGatherShape(dg::InferContext& ctx) {
  const Shape pooled = PooledShape(ctx, false);
  CheckThird(ctx, "values", ctx.input(0).shape(), "x's shape");
  ctx.set_output(0, ctx.input(0).dtype(), pooled);
}

// ----------------------------------------------------------------- schemas

// A user-facing op: (x, rois) -> y [K, C, oh, ow].
dg::OpSchema& PoolingOp(const char* name, const char* py_name,
                        const char* doc) {
  return dg::internal::NewOp(name)
      .PyName(py_name)
      .Doc(doc)
      .Input("x", kFloat, 0, kX)
      .Input("rois", kFloat, DG_ARG_NO_GRAD, kRois)
      .Output("y", kFloat, 0, "Pooled features, [K, C, oh, ow].");
}

// A gradient helper: (x [no gradient], rois, third) -> out.
dg::OpSchema& HelperOp(const char* name, const char* py_name, const char* doc,
                       const char* x_doc, const char* third,
                       const char* third_doc, const char* out,
                       const char* out_doc) {
  return dg::internal::NewOp(name)
      .PyName(py_name)
      .Doc(doc)
      .Input("x", kFloat, DG_ARG_NO_GRAD, x_doc)
      .Input("rois", kFloat, DG_ARG_NO_GRAD, kRois)
      .Input(third, kFloat, 0, third_doc)
      .Output(out, kFloat, 0, out_doc);
}

dg::OpSchema& AlignAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("output_size", DG_ATTR_INTS, kOutSize)
      .Attr("spatial_scale", 1.0, kScale)
      .Attr("sampling_ratio", int64_t{-1}, kSampling)
      .Attr("aligned", true, kAligned)
      .Attr("mode", "avg", kMode);
}

dg::OpSchema& PoolAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("output_size", DG_ATTR_INTS, kOutSize)
      .Attr("spatial_scale", 1.0, kScale);
}

}  // namespace

// ---------------------------------------------- validation (CPU and CUDA)

RoiAttrs ReadRoiAttrs(const dg::KernelContext& ctx, bool align) {
  RoiAttrs a;
  const Shape o = OutputSize(ctx);
  a.oh = o[0];
  a.ow = o[1];
  a.scale = ctx.f("spatial_scale");
  if (align) {
    a.sampling = ctx.i("sampling_ratio");
    a.aligned = ctx.b("aligned");
    const std::string mode = ctx.s("mode");
    DG_CHECK(mode == "avg" || mode == "max", DG_INVALID_ARGUMENT,
             "unknown mode '", mode, "'; expected avg or max");
    a.max_mode = mode == "max";
  }
  return a;
}

// Checks every roi of a host copy of `rois` [k, 5] against a batch of
// `batch` images: integral batch index in range, finite coordinates and,
// for RoiAlign, at most kMaxSamplesPerRoi bilinear samples.
template <typename T>
void CheckRois(const T* rois, int64_t k, int64_t batch, const RoiAttrs& a,
               bool align) {
  for (int64_t i = 0; i < k; ++i) {
    const T* r = rois + 5 * i;
    const double b = static_cast<double>(r[0]);
    DG_CHECK(std::isfinite(b) && b == std::floor(b) && b >= 0 &&
                 b < static_cast<double>(batch),
             DG_INVALID_ARGUMENT, "roi ", i, " has batch index ", b,
             " but x holds ", batch, " image(s): it must be an integer in [0, ",
             batch, ")");
    for (int j = 1; j < 5; ++j) {
      DG_CHECK(std::isfinite(static_cast<double>(r[j])), DG_INVALID_ARGUMENT,
               "roi ", i, " has a non-finite coordinate ", r[j]);
    }
    if (!align) continue;
    const double w = (static_cast<double>(r[3]) - r[1]) * a.scale;
    const double h = (static_cast<double>(r[4]) - r[2]) * a.scale;
    const double gw = static_cast<double>(
        GridSize(a.aligned ? w : std::max(w, 1.0), a.ow, a.sampling));
    const double gh = static_cast<double>(
        GridSize(a.aligned ? h : std::max(h, 1.0), a.oh, a.sampling));
    const double total = gw * gh * static_cast<double>(a.oh * a.ow);
    DG_CHECK(total <= static_cast<double>(kMaxSamplesPerRoi),
             DG_INVALID_ARGUMENT, "roi ", i, " (", r[1], ", ", r[2],
             ", ", r[3], ", ", r[4], ") needs ", gh, " x ", gw,
             " samples in each of its ", a.oh * a.ow, " bins, more than the "
             "limit of 2^22 per roi; pass a small positive sampling_ratio");
  }
}

template void CheckRois<float>(const float*, int64_t, int64_t,
                               const RoiAttrs&, bool);
template void CheckRois<double>(const double*, int64_t, int64_t,
                                const RoiAttrs&, bool);

[[maybe_unused]] static const dg::OpSchema* const kRoiOps[] = {
    &AlignAttrs(PoolingOp(
         "RoiAlign", "roi_align",
         "RoIAlign (Mask R-CNN): each roi is split into oh x ow bins; each "
         "bin is the mean of a regular grid of bilinear samples of x "
         "(Detectron2 / torchvision semantics). Samples outside [-1, H] x "
         "[-1, W] count as 0; in [-1, 0) a coordinate is clamped to 0. "
         "mode='max' takes ONNX's maximum instead of the mean."))
        .Shape(RoiAlignShape),
    &AlignAttrs(HelperOp(
         "RoiAlignGrad", "roi_align_grad",
         "Gradient of RoiAlign with respect to x (its adjoint): each dy is "
         "spread over its bin's bilinear taps (mode avg), or added, times "
         "its weight, to the cell of the term that was the bin's maximum "
         "(mode max; the first one on ties). Linear in dy; x gives the "
         "shape (and, for max, selects the cells).",
         "Pooled input (shape; the cells for mode max).", "dy", kDy, "dx",
         "Gradient of x, x's shape."))
        .Shape(RoiAlignGradShape),
    &PoolAttrs(PoolingOp(
         "RoiPool", "roi_pool",
         "RoIPool (Fast R-CNN): each roi, rounded to feature-map cells, is "
         "split into oh x ow quantised bins; each bin is its maximum "
         "(torchvision semantics; an empty bin gives 0; NaN wins over "
         "numbers)."))
        .Shape(RoiPoolShape),
    &PoolAttrs(HelperOp(
         "RoiPoolGrad", "roi_pool_grad",
         "Gradient of RoiPool with respect to x: each dy is added to the "
         "cell its bin's maximum came from (the first one in row-major order "
         "on ties). Linear in dy.",
         "Pooled input (selects the cells).", "dy", kDy, "dx",
         "Gradient of x, x's shape."))
        .Shape(RoiPoolGradShape),
    &PoolAttrs(HelperOp(
         "RoiPoolGather", "roi_pool_gather",
         "Reads values where RoiPool takes its maxima: output (k, c, i, j) "
         "is values[b_k, c] at the argmax of x[b_k, c] in bin (i, j), 0 for "
         "an empty bin. The adjoint of RoiPoolGrad; RoiPool(x) is "
         "RoiPoolGather(x, rois, x).",
         "Pooled input (selects the cells).", "values",
         "Values read, x's shape.", "y",
         "Gathered values, [K, C, oh, ow]."))
        .Shape(RoiPoolGatherShape),
};

}  // namespace vision
