// Non-maximum suppression: Nms and BatchedNms (schemas, shape rules, CPU
// kernels; the CUDA kernels are in cuda/nms.cu).
//
// The core has no data-dependent output shapes, so both ops return the
// padded form: keep [N] int64 holds the kept indices by decreasing score
// (ties: lower index first) followed by -1, and num_kept [] int64 counts
// them. The Python functions nms / batched_nms slice keep[:num_kept].
//
// Definition (the greedy rule of torchvision, made total):
//  * boxes are (x1, y1, x2, y2); a box's area is max(x2 - x1, 0) *
//    max(y2 - y1, 0), so a reversed box has area 0;
//  * IoU(a, b) = inter / (area_a + area_b - inter), and 0 when that union
//    is not positive (two empty boxes never suppress each other);
//  * boxes are visited by decreasing score, ties by increasing index; a
//    visited box not yet suppressed is kept and suppresses every later box
//    (of its category, for BatchedNms) with IoU > iou_threshold;
//  * a box with a NaN score is never kept and suppresses nothing; a NaN
//    coordinate makes every IoU with that box NaN, which suppresses nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace vision {
namespace {

constexpr const char* kBoxes = "Boxes, [N, 4]: (x1, y1, x2, y2) per row.";
constexpr const char* kScores = "Scores, [N], boxes' dtype.";
constexpr const char* kIdxs =
    "Category of each box, [N] int64: boxes of different categories never "
    "suppress each other.";
constexpr const char* kIou =
    "Boxes overlapping a kept box with IoU strictly above this are "
    "suppressed.";
constexpr const char* kKeep =
    "Kept indices by decreasing score (ties: lower index first), then -1 "
    "padding, [N] int64.";
constexpr const char* kNumKept = "Number of kept boxes, [] int64.";

// Checks boxes [N, 4], scores [N] (and idxs [N] int64 when `batched`).
void NmsShape(dg::InferContext& ctx, bool batched) {
  const dg::TensorRef boxes = ctx.input(0), scores = ctx.input(1);
  const std::string box_shape = ShapeStr(boxes.shape());
  DG_CHECK(boxes.ndim() == 2 && boxes.dim(1) == 4, DG_INVALID_ARGUMENT,
           "boxes must be [N, 4] (x1, y1, x2, y2), got shape ", box_shape);
  const int64_t n = boxes.dim(0);
  DG_CHECK(scores.ndim() == 1 && scores.dim(0) == n, DG_INVALID_ARGUMENT,
           "scores must be [N] with N = ", n, " (boxes ", box_shape,
           "), got shape ", ShapeStr(scores.shape()));
  DG_CHECK(scores.dtype() == boxes.dtype(), DG_INVALID_ARGUMENT,
           "scores must have boxes' dtype ", dg::DTypeName(boxes.dtype()),
           ", got ", dg::DTypeName(scores.dtype()));
  if (batched) {
    const dg::TensorRef idxs = ctx.input(2);
    DG_CHECK(idxs.ndim() == 1 && idxs.dim(0) == n, DG_INVALID_ARGUMENT,
             "idxs must be [N] with N = ", n, " (boxes ", box_shape,
             "), got shape ", ShapeStr(idxs.shape()));
  }
  const double thr = ctx.f("iou_threshold");
  DG_CHECK(!std::isnan(thr), DG_INVALID_ARGUMENT,
           "iou_threshold must be a number, got NaN");
  ctx.set_output(0, DG_INT64, {n});
  ctx.set_output(1, DG_INT64, {});
}

void SingleShape(dg::InferContext& ctx) { NmsShape(ctx, false); }
void BatchedShape(dg::InferContext& ctx) { NmsShape(ctx, true); }

// Box i of `b` [N, 4] with its area.
template <typename T>
struct Box {
  T x1, y1, x2, y2, area;
};

template <typename T>
Box<T> LoadBox(const T* b, int64_t i) {
  const T* p = b + 4 * i;
  const T w = std::max(p[2] - p[0], T(0)), h = std::max(p[3] - p[1], T(0));
  return {p[0], p[1], p[2], p[3], w * h};
}

// IoU > thr, with IoU = 0 when the union is not positive.
template <typename T>
bool Overlaps(const Box<T>& a, const Box<T>& b, T thr) {
  const T w = std::max(std::min(a.x2, b.x2) - std::max(a.x1, b.x1), T(0));
  const T h = std::max(std::min(a.y2, b.y2) - std::max(a.y1, b.y1), T(0));
  const T inter = w * h;
  const T uni = a.area + b.area - inter;
  return uni > T(0) && inter / uni > thr;
}

// The greedy pass. `idxs` is null for Nms.
template <typename T>
void NmsCpu(dg::KernelContext& ctx, const int64_t* idxs) {
  const int64_t n = ctx.input(0).dim(0);
  const T* boxes = ctx.input(0).data<const T>();
  const T* scores = ctx.input(1).data<const T>();
  const T thr = static_cast<T>(ctx.f("iou_threshold"));
  int64_t* keep = ctx.output(0).data<int64_t>();
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isnan(scores[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return scores[a] > scores[b];
  });
  std::vector<Box<T>> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    sorted[i] = LoadBox(boxes, order[i]);
  }
  std::vector<char> removed(order.size(), 0);
  int64_t kept = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (removed[i]) continue;
    keep[kept++] = order[i];
    for (size_t j = i + 1; j < order.size(); ++j) {
      if (removed[j]) continue;
      if (idxs && idxs[order[i]] != idxs[order[j]]) continue;
      if (Overlaps(sorted[i], sorted[j], thr)) removed[j] = 1;
    }
  }
  std::fill(keep + kept, keep + n, int64_t{-1});
  *ctx.output(1).data<int64_t>() = kept;
}

template <typename T>
void SingleNmsCpu(dg::KernelContext& ctx) {
  NmsCpu<T>(ctx, nullptr);
}

template <typename T>
void BatchedNmsCpu(dg::KernelContext& ctx) {
  NmsCpu<T>(ctx, ctx.input(2).data<const int64_t>());
}

dg::OpSchema& NmsOutputs(dg::OpSchema& op) {
  return op.Output("keep", dg::Bit(DG_INT64), 0, kKeep)
      .Output("num_kept", dg::Bit(DG_INT64), 0, kNumKept)
      .RequiredAttr("iou_threshold", DG_ATTR_FLOAT, kIou)
      .Flags(DG_OP_NO_GRAD);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kNmsOps[] = {
    &NmsOutputs(dg::internal::NewOp("Nms")
                    .PyName("nms_padded")
                    .Doc("Greedy non-maximum suppression in padded form: "
                         "boxes by decreasing score suppress later boxes "
                         "whose IoU with them exceeds iou_threshold. Areas "
                         "use max(x2 - x1, 0) * max(y2 - y1, 0); NaN scores "
                         "are never kept.")
                    .Input("boxes", kFloat, DG_ARG_NO_GRAD, kBoxes)
                    .Input("scores", kFloat, DG_ARG_NO_GRAD, kScores))
        .Shape(SingleShape),
    &NmsOutputs(dg::internal::NewOp("BatchedNms")
                    .PyName("batched_nms_padded")
                    .Doc("Non-maximum suppression per category in padded "
                         "form: as Nms, but a box only suppresses boxes of "
                         "its own category (idxs). keep is ordered by "
                         "decreasing score across all categories.")
                    .Input("boxes", kFloat, DG_ARG_NO_GRAD, kBoxes)
                    .Input("scores", kFloat, DG_ARG_NO_GRAD, kScores)
                    .Input("idxs", dg::Bit(DG_INT64), DG_ARG_NO_GRAD, kIdxs))
        .Shape(BatchedShape),
};

DG_KERNEL("Nms", "cpu", SingleNmsCpu, float, double);
DG_KERNEL("BatchedNms", "cpu", BatchedNmsCpu, float, double);

}  // namespace vision
