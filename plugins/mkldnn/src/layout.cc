// Blocked-layout (nChw16c) ops for inference graphs, defined by this
// plugin. The core's tensors are plain NCHW, so every oneDNN convolution
// reorders its input into nChw16c and its output back. The nchw16c graph
// pass (python/dragon_mkldnn/_layout.py) instead keeps a chain of float32
// convolutions, max pooling and element-wise ops in nChw16c: a blocked
// tensor is an ordinary dense tensor of shape [N, C/16, H, W, 16] (the
// memory order of oneDNN's aBcd16b), so element-wise ops of the core run on
// it unchanged when their operands share that shape.
//
//   Nchw16cFromNchw(x)      [N, C, H, W]      -> [N, C/16, H, W, 16]
//   NchwFromNchw16c(x)      [N, C/16, H, W, 16] -> [N, C, H, W]
//   Conv2dNchw16c(x, w, b)  blocked (or a plain x with C < 16, read as
//                           is) -> blocked; Conv2dBiasAct's attributes
//   MaxPool2dNchw16c(x)     blocked -> blocked; MaxPool2d's attributes and
//                           semantics (NaN wins its window)
//
// C must be a multiple of 16 (no padded channels). The ops have no
// gradient: the pass rewrites inference graphs only. Conv2dNchw16c's kernel
// is conv.cc's (constant weights pre-packed per call site), the pooling
// kernel is pool.cc's.
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace mkldnn_plugin {
namespace {

constexpr int64_t kBlock = 16;
constexpr DgDTypeMask kF32 = dg::Bit(DG_FLOAT32);

std::vector<int64_t> BlockedShape(const std::vector<int64_t>& nchw) {
  return {nchw[0], nchw[1] / kBlock, nchw[2], nchw[3], kBlock};
}

void CheckBlocked(const dg::TensorRef& t, const char* op, const char* what) {
  DG_CHECK(t.ndim() == 5 && t.dim(4) == kBlock, DG_INVALID_ARGUMENT, op, ": ",
           what, " must be a blocked tensor [N, C/16, H, W, 16], got ",
           dg::DTypeName(t.dtype()), dg::ShapeStr(t.shape()));
}

void ToBlockedShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  DG_CHECK(x.ndim() == 4 && x.dim(1) % kBlock == 0, DG_INVALID_ARGUMENT,
           "Nchw16cFromNchw: x must be [N, C, H, W] with C a multiple of 16, "
           "got ", dg::DTypeName(x.dtype()), dg::ShapeStr(x.shape()));
  ctx.set_output(0, x.dtype(), BlockedShape(x.shape()));
}

void ToPlainShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  CheckBlocked(x, "NchwFromNchw16c", "x");
  ctx.set_output(0, x.dtype(),
                 {x.dim(0), x.dim(1) * kBlock, x.dim(2), x.dim(3)});
}

// Output extent of a window sweep (Conv2d's floor rule; MaxPool2d's ceil
// rule drops a last window that starts in the right padding).
int64_t Extent(int64_t len, int64_t pad_total, int64_t pad_l, int64_t k,
               int64_t s, int64_t d, bool ceil_mode) {
  const int64_t steps = len + pad_total - (d * (k - 1) + 1);
  if (steps < 0) return 0;
  int64_t n = (ceil_mode ? (steps + s - 1) / s : steps / s) + 1;
  if (ceil_mode && (n - 1) * s >= len + pad_l) --n;
  return n;
}

// 1, 2 (per axis) or, for pads, 4 (top, left, bottom, right) values.
std::vector<int64_t> Axes(const dg::InferContext& ctx, const char* op,
                          const char* name, std::vector<int64_t> fallback,
                          bool four = false) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty()) v = fallback;
  if (v.size() == 1) v.push_back(v[0]);
  DG_CHECK(v.size() == 2 || (four && v.size() == 4), DG_INVALID_ARGUMENT, op,
           ": ", name, " ", dg::ShapeStr(v), " must hold 1, 2",
           four ? " or 4" : "", " values");
  if (four && v.size() == 2) v = {v[0], v[1], v[0], v[1]};
  return v;
}

void ConvShape(dg::InferContext& ctx) {
  const char* op = "Conv2dNchw16c";
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1);
  const bool blocked = x.ndim() == 5;
  if (blocked) CheckBlocked(x, op, "x");
  DG_CHECK(blocked || x.ndim() == 4, DG_INVALID_ARGUMENT, op,
           ": x must be blocked [N, C/16, H, W, 16] or plain [N, C, H, W], "
           "got ", dg::DTypeName(x.dtype()), dg::ShapeStr(x.shape()));
  const int64_t c = blocked ? x.dim(1) * kBlock : x.dim(1);
  DG_CHECK(c > 0 && x.dim(2) > 0 && x.dim(3) > 0, DG_INVALID_ARGUMENT, op,
           ": x ", dg::ShapeStr(x.shape()), " has an empty channel or spatial "
           "axis (the plain Conv2d serves such calls)");
  DG_CHECK(blocked || c < kBlock, DG_INVALID_ARGUMENT, op,
           ": x must be blocked [N, C/16, H, W, 16] or, for a first layer, "
           "plain [N, C, H, W] with C < 16; got ", dg::ShapeStr(x.shape()));
  DG_CHECK(w.ndim() == 4 && w.dim(1) == c && w.dim(0) % kBlock == 0 &&
               w.dim(0) > 0 && w.dim(2) > 0 && w.dim(3) > 0,
           DG_INVALID_ARGUMENT, op, ": w must be [O, ", c,
           ", kh, kw] with O a positive multiple of 16 and kh, kw >= 1, got ",
           dg::ShapeStr(w.shape()), " for x ", dg::ShapeStr(x.shape()));
  DG_CHECK(x.dtype() == DG_FLOAT32 && w.dtype() == DG_FLOAT32,
           DG_INVALID_ARGUMENT, op, ": float32 only, got x ",
           dg::DTypeName(x.dtype()), " and w ", dg::DTypeName(w.dtype()));
  if (ctx.num_inputs() > 2) {
    const dg::TensorRef b = ctx.input(2);
    DG_CHECK(b.ndim() == 1 && b.dim(0) == w.dim(0) &&
                 b.dtype() == DG_FLOAT32,
             DG_INVALID_ARGUMENT, op, ": b must be float32[", w.dim(0),
             "], got ", dg::DTypeName(b.dtype()), dg::ShapeStr(b.shape()));
  }
  DG_CHECK(ctx.i("groups") == 1, DG_INVALID_ARGUMENT, op,
           ": groups must be 1, got ", ctx.i("groups"));
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT, op,
           ": activation must be 'none' or 'relu', got '", act, "'");
  const auto s = Axes(ctx, op, "strides", {1, 1});
  const auto d = Axes(ctx, op, "dilations", {1, 1});
  const auto p = Axes(ctx, op, "pads", {0, 0}, true);
  int64_t out[2];
  for (int a = 0; a < 2; ++a) {
    DG_CHECK(s[a] > 0 && d[a] > 0 && p[a] >= 0 && p[a + 2] >= 0,
             DG_INVALID_ARGUMENT, op, ": strides and dilations must be "
             "positive, pads non-negative");
    out[a] = Extent(x.dim(2 + a), p[a] + p[a + 2], p[a],
                    w.dim(2 + a), s[a], d[a], false);
    DG_CHECK(out[a] > 0, DG_INVALID_ARGUMENT, op, ": the filter ",
             dg::ShapeStr(w.shape()), " does not fit x ",
             dg::ShapeStr(x.shape()));
  }
  ctx.set_output(0, DG_FLOAT32,
                 {x.dim(0), w.dim(0) / kBlock, out[0], out[1], kBlock});
}

void PoolShape(dg::InferContext& ctx) {
  const char* op = "MaxPool2dNchw16c";
  const dg::TensorRef x = ctx.input(0);
  CheckBlocked(x, op, "x");
  const auto k = Axes(ctx, op, "kernel_size", {});
  const auto s = Axes(ctx, op, "strides", k);
  const auto p = Axes(ctx, op, "pads", {0, 0}, true);
  const auto d = Axes(ctx, op, "dilations", {1, 1});
  int64_t out[2];
  for (int a = 0; a < 2; ++a) {
    DG_CHECK(k[a] > 0 && s[a] > 0 && d[a] > 0 && p[a] >= 0 &&
                 2 * p[a] <= k[a] && p[a + 2] >= 0 && 2 * p[a + 2] <= k[a],
             DG_INVALID_ARGUMENT, op, ": kernel_size ", dg::ShapeStr(k),
             ", strides ", dg::ShapeStr(s), ", dilations ", dg::ShapeStr(d),
             " must be positive and pads ", dg::ShapeStr(p),
             " in [0, kernel_size / 2]");
    const int64_t len = x.dim(2 + a);
    DG_CHECK(len > 0, DG_INVALID_ARGUMENT, op, ": x ", dg::ShapeStr(x.shape()),
             " has an empty spatial axis; pooling needs H, W >= 1");
    out[a] = Extent(len, p[a] + p[a + 2], p[a], k[a], s[a], d[a],
                    ctx.b("ceil_mode"));
    DG_CHECK(out[a] > 0, DG_INVALID_ARGUMENT, op, ": the window does not fit x ",
             dg::ShapeStr(x.shape()));
    // As MaxPool2d: every window must reach a cell of the input (with
    // dilation one can fall entirely in the padding).
    for (int64_t o = 0; o < out[a]; ++o) {
      bool touches = false;
      for (int64_t j = 0; j < k[a] && !touches; ++j) {
        const int64_t c = o * s[a] - p[a] + j * d[a];
        touches = c >= 0 && c < len;
      }
      DG_CHECK(touches, DG_INVALID_ARGUMENT, op, ": window ", o, " along ",
               a ? "W" : "H", " covers only padding (kernel_size ",
               dg::ShapeStr(k), ", dilations ", dg::ShapeStr(d), ", pads ",
               dg::ShapeStr(p), ", x ", dg::ShapeStr(x.shape()), ")");
    }
  }
  ctx.set_output(0, x.dtype(), {x.dim(0), x.dim(1), out[0], out[1], kBlock});
}

[[maybe_unused]] const dg::OpSchema* const kOps[] = {
    &dg::internal::NewOp("Nchw16cFromNchw")
        .Doc("Reorders a float32 [N, C, H, W] tensor (C a multiple of 16) "
             "into the blocked [N, C/16, H, W, 16] layout of oneDNN's "
             "nChw16c (inserted by the mkldnn plugin's nchw16c pass).")
        .Input("x", kF32, 0, "Plain [N, C, H, W].")
        .Output("y", kF32, 0, "Blocked [N, C/16, H, W, 16].")
        .Flags(DG_OP_NO_GRAD)
        .Shape(ToBlockedShape),
    &dg::internal::NewOp("NchwFromNchw16c")
        .Doc("Reorders a blocked [N, C/16, H, W, 16] tensor back into plain "
             "[N, C, H, W].")
        .Input("x", kF32, 0, "Blocked [N, C/16, H, W, 16].")
        .Output("y", kF32, 0, "Plain [N, C, H, W].")
        .Flags(DG_OP_NO_GRAD)
        .Shape(ToPlainShape),
    &dg::internal::NewOp("Conv2dNchw16c")
        .Doc("Conv2dBiasAct on blocked tensors: x [N, C/16, H, W, 16] (or a "
             "plain [N, C, H, W] first-layer input with C < 16), filter "
             "[O, C, kh, kw] with O a multiple of 16, optional bias [O]; "
             "y = act(conv2d(x, w) + b) as [N, O/16, Ho, Wo, 16]. float32, "
             "groups = 1, inference only.")
        .Input("x", kF32, 0, "Blocked input, or plain with C < 16.")
        .Input("w", kF32, 0, "Filter [O, C, kh, kw].")
        .Input("b", kF32, DG_ARG_OPTIONAL, "Optional bias [O].")
        .Output("y", kF32, 0, "Blocked output [N, O/16, Ho, Wo, 16].")
        .Attr("strides", std::vector<int64_t>{1, 1}, "As Conv2d's.")
        .Attr("pads", std::vector<int64_t>{0, 0}, "As Conv2d's.")
        .Attr("dilations", std::vector<int64_t>{1, 1}, "As Conv2d's.")
        .Attr("groups", int64_t{1}, "Must be 1.")
        .Attr("activation", "none", "'none' or 'relu' (NaN kept, as Relu).")
        .Flags(DG_OP_NO_GRAD)
        .Shape(ConvShape),
    &dg::internal::NewOp("MaxPool2dNchw16c")
        .Doc("MaxPool2d on a blocked [N, C/16, H, W, 16] tensor, with its "
             "attributes and semantics (padded cells never win, NaN wins "
             "its window).")
        .Input("x", kF32, 0, "Blocked input.")
        .Output("y", kF32, 0, "Blocked window maxima.")
        .RequiredAttr("kernel_size", DG_ATTR_INTS, "As MaxPool2d's.")
        .Attr("strides", std::vector<int64_t>{}, "As MaxPool2d's.")
        .Attr("pads", std::vector<int64_t>{0, 0}, "As MaxPool2d's.")
        .Attr("dilations", std::vector<int64_t>{1, 1}, "As MaxPool2d's.")
        .Attr("ceil_mode", false, "As MaxPool2d's.")
        .Flags(DG_OP_NO_GRAD)
        .Shape(PoolShape),
};

// The two reorders: oneDNN's between the plain and the nChw16c views.
void Reorder16(dg::KernelContext& ctx, bool to_blocked) {
  const dg::TensorRef plain = to_blocked ? ctx.input(0) : ctx.output(0);
  const dg::TensorRef blocked = to_blocked ? ctx.output(0) : ctx.input(0);
  if (plain.numel() == 0) return;
  const dnnl::memory::desc b = Nchw16cDesc(Dims(plain.shape()), DataType(plain.dtype()));
  const dnnl::memory pm = Memory(Desc(plain), plain), bm = Memory(b, blocked);
  if (to_blocked) {
    CopyInto(ctx, pm, bm);
  } else {
    CopyInto(ctx, bm, pm);
  }
}

template <typename T>
void ToBlocked(dg::KernelContext& ctx) { Reorder16(ctx, true); }
template <typename T>
void ToPlain(dg::KernelContext& ctx) { Reorder16(ctx, false); }

DG_KERNEL_EX("Nchw16cFromNchw", "cpu", kPriority, 0, ToBlocked, float);
DG_KERNEL_EX("NchwFromNchw16c", "cpu", kPriority, 0, ToPlain, float);

}  // namespace
}  // namespace mkldnn_plugin
