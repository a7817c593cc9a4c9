// oneDNN convolution kernels for the core's NCHW ops: Conv2d,
// Conv2dBiasAct (bias, then an optional NaN-keeping relu pass), ConvTranspose2d
// (oneDNN's deconvolution) and Conv2dBackpropFilter (convolution backward
// weights), in float32 and bfloat16.
//
// Every call goes through one plan (ConvPlan): the geometry in oneDNN's
// terms (dilation - 1, a right padding that covers exactly the rows the
// window reaches), the descriptors the primitive is created with, and the
// cache key. oneDNN chooses the weights' layout (format_tag::any); the
// activations run channels-last (nhwc) or, for wide float32 forward
// convolutions, nChw16c (PickLayout). The core's plain (possibly strided)
// NCHW tensors are reordered into those layouts per call and the result
// back into the output (docs/conv.md has the measurements behind the
// choice and the DRAGON_MKLDNN_CONV_LAYOUT override).
//
// A float32 call whose output map has at most 4 pixels (ResNet's last stage)
// runs instead as im2col + one oneDNN matmul (conv_gemm.h, PlanGemm); the
// weights' conversions to and from the blocked layouts go through the
// plugin's AVX-512 transposes where they serve (weights.cc, CopyInto).
//
// supports() builds (and caches) the primitive descriptor of the call, so
// a call oneDNN cannot express -- no implementation for a dtype on this
// CPU, a zero channel count, an input with a negative stride -- is
// declined before the kernel runs and the core picks cpu_eigen; the kernel
// itself never falls back.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "conv_gemm.h"

namespace mkldnn_plugin {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

enum class ConvKind { kForward, kTranspose, kFilterGrad };

// How source and destination are presented to the primitive (the
// weights are always format_tag::any, reordered per call).
enum class Layout {
  kAuto,     // per call: see PickLayout()
  kNhwc,     // channels-last, reordered per call
  kBlocked,  // nChw16c (aBcd16b), reordered per call
  kFirst,    // source nchw as is, destination nChw16c (a first layer)
  kAny,      // format_tag::any: oneDNN's choice, reordered per call
  kPlain,    // the core's nchw as is
};

// DRAGON_MKLDNN_CONV_LAYOUT=auto|nhwc|blocked|any|plain (read once per
// process; the override is for measurements, see tests/perf_conv.py).
Layout LayoutOverride() {
  static const Layout layout = [] {
    const char* env = std::getenv("DRAGON_MKLDNN_CONV_LAYOUT");
    const std::string v = env ? env : "";
    if (v == "nhwc") return Layout::kNhwc;
    if (v == "blocked") return Layout::kBlocked;
    if (v == "any") return Layout::kAny;
    if (v == "plain") return Layout::kPlain;
    return Layout::kAuto;
  }();
  return layout;
}

// A call in oneDNN's terms. "image" is Conv2d's input side (the source of
// a forward convolution or the destination of a deconvolution), "window"
// the other side.
struct ConvPlan {
  ConvKind kind;
  memory::data_type dt;
  memory::dims strides, dilates, pad_l, pad_r;
  int64_t groups = 1;
  memory::dims src_dims, wei_dims, dst_dims;  // wei_dims grouped if groups>1
  bool bias = false;
  bool relu = false;
  Layout layout = Layout::kNhwc;
  // The im2col + GEMM path (conv_gemm.h) for tiny output maps, with its
  // geometry; chosen by MakePlan, deterministically, from the shapes.
  bool gemm = false;
  GemmConvGeometry geo{};
  std::string key;
};

// Whether oneDNN runs AMX kernels on this CPU (read once).
bool CpuHasAmx() {
  static const bool amx = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & want) == want;
  }();
  return amx;
}

// Output channels from which a few-channel float32 convolution runs as a
// first layer (Layout::kFirst); measured in docs/conv.md.
constexpr int64_t kFirstMinOut = 32;

// The layout measured fastest for the call (docs/conv.md): a float32
// forward convolution with at least 16 channels per group on both sides
// runs oneDNN's nChw16c direct kernel (jit:avx512_core), faster than its
// nhwc brgconv; everything else (bfloat16 on AMX, depthwise, few channels,
// the deconvolution and the filter gradient) runs channels-last.
Layout PickLayout(const ConvPlan& p) {
  if (LayoutOverride() != Layout::kAuto) return LayoutOverride();
  const bool wide = p.src_dims[1] / p.groups >= 16 &&
                    p.dst_dims[1] / p.groups >= 16;
  const bool f32_plain = p.dt == memory::data_type::f32 && p.groups == 1;
  const bool f32_forward = f32_plain && p.kind == ConvKind::kForward;
  if (f32_forward && wide) return Layout::kBlocked;
  // The deconvolution and the filter gradient: nChw16c's direct kernels and
  // jit:blk reorders beat nhwc's on CPUs without AMX (an AVX-512 EPYC:
  // 8.9 vs 10.1 ms for the two on the 8x64x56x56 benchmark); the AMX Xeon
  // this plugin was first measured on ran them faster channels-last.
  if (f32_plain && wide && !CpuHasAmx()) return Layout::kBlocked;
  // A first layer (few input channels, e.g. RGB, many output channels):
  // oneDNN's direct kernel reads the plain nchw image and writes nChw16c,
  // whose reorder back (jit:blk) is cheaper than nhwc's (jit:uni).
  if (f32_forward && p.src_dims[1] < 16 && p.dst_dims[1] >= kFirstMinOut) {
    return Layout::kFirst;
  }
  return Layout::kNhwc;
}

// Reads strides, pads and dilations. The right/bottom padding is the one
// that makes the windows end exactly at the last tap (it may be smaller
// than the attribute, even negative, when the stride skips rows): oneDNN
// requires window = (image - span + pad_l + pad_r) / stride + 1.
void ReadGeometry(const dg::KernelContext& ctx, const memory::dims& image,
                  const memory::dims& window, const memory::dims& kernel,
                  ConvPlan* p) {
  const std::vector<int64_t> s = ctx.ints("strides");
  const std::vector<int64_t> d = ctx.ints("dilations");
  const std::vector<int64_t> pads = ctx.ints("pads");
  p->groups = ctx.i("groups");
  p->strides = {s[0], s[1]};
  p->dilates = {d[0] - 1, d[1] - 1};
  p->pad_l = {pads[0], pads[1]};
  p->pad_r.resize(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t span = d[i] * (kernel[i] - 1) + 1;
    p->pad_r[i] = (window[2 + i] - 1) * s[i] + span - image[2 + i] - pads[i];
  }
}

// Filter dims in oneDNN's order [(g,) O/g, C/g, kh, kw] for a convolution
// whose source has `c` channels and destination `o`.
memory::dims FilterDims(int64_t o, int64_t c, int64_t kh, int64_t kw,
                        int64_t groups) {
  if (groups == 1) return {o, c, kh, kw};
  return {groups, o / groups, c / groups, kh, kw};
}

// The descriptor of the core's filter tensor w, seen with FilterDims. For
// Conv2d (and the filter gradient) w is [O, C/g, kh, kw]; for
// ConvTranspose2d it is [C, O/g, kh, kw] (C = the deconvolution's input
// channels), so its first two axes swap.
memory::desc FilterDesc(const dg::TensorRef& w, const ConvPlan& p) {
  const memory::dims st = Dims(w.strides());
  memory::dims strides;
  if (p.kind != ConvKind::kTranspose) {
    strides = p.groups == 1
        ? st : memory::dims{p.wei_dims[1] * st[0], st[0], st[1], st[2], st[3]};
  } else {
    strides = p.groups == 1
        ? memory::dims{st[1], st[0], st[2], st[3]}
        : memory::dims{p.wei_dims[2] * st[0], st[1], st[0], st[2], st[3]};
  }
  return memory::desc(p.wei_dims, p.dt, strides);
}

// The descriptor the primitive is created with for an activation tensor.
memory::desc Requested(const ConvPlan& p, const memory::dims& dims,
                       bool is_src) {
  switch (p.layout) {
    case Layout::kPlain: return memory::desc(dims, p.dt, tag::nchw);
    case Layout::kFirst:
      return memory::desc(dims, p.dt, is_src ? tag::nchw : tag::nChw16c);
    case Layout::kBlocked: return memory::desc(dims, p.dt, tag::nChw16c);
    case Layout::kAny: return memory::desc(dims, p.dt, tag::any);
    case Layout::kAuto:
    case Layout::kNhwc: break;
  }
  return memory::desc(dims, p.dt, tag::nhwc);
}

GemmConvKind GemmKind(ConvKind kind) {
  switch (kind) {
    case ConvKind::kForward: return GemmConvKind::kForward;
    case ConvKind::kTranspose: return GemmConvKind::kBackwardData;
    case ConvKind::kFilterGrad: break;
  }
  return GemmConvKind::kFilterGrad;
}

// Whether the call takes the GEMM path (conv_gemm.h): float32, one group,
// no dilation, no bias or activation, the plain NCHW op, no layout
// override (those measure oneDNN's direct kernels), an output map of at
// most kGemmMaxPixels pixels, and an optimised oneDNN matmul for it.
bool PlanGemm(const dg::KernelContext& ctx, ConvPlan* p) {
  const bool blocked_op = std::string(ctx.op_name()) == "Conv2dNchw16c";
  if (p->dt != memory::data_type::f32 || p->groups != 1 || p->bias ||
      p->relu || p->dilates[0] != 0 || p->dilates[1] != 0 ||
      LayoutOverride() != Layout::kAuto || blocked_op) {
    return false;
  }
  const bool t = p->kind == ConvKind::kTranspose;
  const memory::dims& image = t ? p->dst_dims : p->src_dims;
  const memory::dims& window = t ? p->src_dims : p->dst_dims;
  GemmConvGeometry& g = p->geo;
  g.n = image[0];
  g.c = image[1];
  g.h = image[2];
  g.w = image[3];
  g.o = window[1];
  g.kh = p->wei_dims[2];
  g.kw = p->wei_dims[3];
  g.oh = window[2];
  g.ow = window[3];
  g.sh = p->strides[0];
  g.sw = p->strides[1];
  g.ph = p->pad_l[0];
  g.pw = p->pad_l[1];
  return GemmConvServes(p->geo) &&
         GemmConvPrimitive(ctx.frame(), p->geo, GemmKind(p->kind));
}

// Fills the plan of the call in ctx (kind from the op). False when oneDNN
// cannot express it (an empty channel axis).
bool MakePlan(const dg::KernelContext& ctx, ConvKind kind, ConvPlan* p) {
  const std::string op = ctx.op_name();
  p->kind = kind;
  const dg::TensorRef x = ctx.input(0);
  p->dt = DataType(x.dtype());
  const memory::dims xd = PlainDims(x);
  const memory::dims yd = PlainDims(ctx.output(0));
  if (xd.size() != 4 || yd.size() != 4) return false;
  if (kind == ConvKind::kFilterGrad) {
    const memory::dims dyd = Dims(ctx.input(1).shape());
    const memory::dims f = Dims(ctx.ints("filter_shape"));
    ReadGeometry(ctx, xd, dyd, {f[2], f[3]}, p);
    p->src_dims = xd;
    p->dst_dims = dyd;
    p->wei_dims = FilterDims(f[0], xd[1], f[2], f[3], p->groups);
  } else {
    const dg::TensorRef w = ctx.input(1);
    const bool fwd = kind == ConvKind::kForward;
    const memory::dims& image = fwd ? xd : yd;
    const memory::dims& window = fwd ? yd : xd;
    ReadGeometry(ctx, image, window, {w.dim(2), w.dim(3)}, p);
    p->src_dims = xd;
    p->dst_dims = yd;
    p->wei_dims = FilterDims(yd[1], xd[1], w.dim(2), w.dim(3), p->groups);
    p->bias = ctx.num_inputs() > 2 && ctx.frame()->inputs[2] != nullptr;
    p->relu = (op == "Conv2dBiasAct" || op == "Conv2dNchw16c") &&
              ctx.s("activation") == "relu";
  }
  if (p->src_dims[1] == 0 || p->dst_dims[1] == 0) return false;
  // An input with an empty spatial axis (all taps in the padding) but a
  // non-empty output: oneDNN has no zero-volume convolution with outputs.
  if (kind == ConvKind::kForward && x.numel() == 0 &&
      ctx.output(0).numel() != 0) {
    return false;
  }
  if (op == "Conv2dNchw16c") {  // source nChw16c (or a plain first layer)
    if (p->dt != memory::data_type::f32 || p->groups != 1) return false;
    p->layout = x.ndim() == 5 ? Layout::kBlocked : Layout::kFirst;
  } else {
    p->layout = PickLayout(*p);
  }
  p->gemm = x.numel() != 0 && ctx.output(0).numel() != 0 && PlanGemm(ctx, p);
  p->key = Key("conv", static_cast<int>(kind), static_cast<int>(p->layout),
               static_cast<int>(p->dt),
               p->src_dims, p->wei_dims, p->dst_dims, p->strides, p->dilates,
               p->pad_l, p->pad_r, p->bias, p->relu);
  return true;
}

// The convolution's attributes (the plan adds none today).
dnnl::primitive_attr ConvAttr(const ConvPlan& /*plan*/) {
  dnnl::primitive_attr attr = Attr();
  return attr;
}

memory::desc AnyFilter(const ConvPlan& p) {
  return memory::desc(p.wei_dims, p.dt, tag::any);
}

memory::desc BiasDesc(const ConvPlan& p) {
  return p.bias ? Plain({p.dst_dims[1]}, p.dt) : memory::desc();
}

// The forward convolution's descriptor (inference for Conv2d, training as
// the hint of the filter gradient).
dnnl::convolution_forward::primitive_desc ForwardPd(const ConvPlan& p,
                                                    dnnl::prop_kind prop) {
  return dnnl::convolution_forward::primitive_desc(
      Engine(), prop, dnnl::algorithm::convolution_direct,
      Requested(p, p.src_dims, true), AnyFilter(p), BiasDesc(p),
      Requested(p, p.dst_dims, false), p.strides, p.dilates, p.pad_l, p.pad_r,
      ConvAttr(p));
}

auto ForwardPrim(const ConvPlan& p) {
  return Cached<dnnl::convolution_forward>(p.key, [&] {
    return ForwardPd(p, dnnl::prop_kind::forward_inference);
  });
}

auto TransposePrim(const ConvPlan& p) {
  return Cached<dnnl::deconvolution_forward>(p.key, [&] {
    return dnnl::deconvolution_forward::primitive_desc(
        Engine(), dnnl::prop_kind::forward_inference,
        dnnl::algorithm::deconvolution_direct, Requested(p, p.src_dims, true),
        AnyFilter(p), BiasDesc(p), Requested(p, p.dst_dims, false), p.strides,
        p.dilates, p.pad_l, p.pad_r, ConvAttr(p));
  });
}

// The filter gradient; the forward hint is built inside the cached maker,
// so it is made once per shape with the primitive.
auto FilterGradPrim(const ConvPlan& p) {
  return Cached<dnnl::convolution_backward_weights>(p.key, [&] {
    const auto hint = ForwardPd(p, dnnl::prop_kind::forward_training);
    return dnnl::convolution_backward_weights::primitive_desc(
        Engine(), dnnl::algorithm::convolution_direct,
        Requested(p, p.src_dims, true), AnyFilter(p), memory::desc(),
        Requested(p, p.dst_dims, false), p.strides, p.dilates, p.pad_l, p.pad_r,
        hint, Attr());
  });
}

// Builds (or finds) the call's primitive; false when oneDNN has none.
bool HasPrimitive(const ConvPlan& p) {
  if (p.gemm) return true;  // PlanGemm built its matmul
  try {
    switch (p.kind) {
      case ConvKind::kForward: ForwardPrim(p); break;
      case ConvKind::kTranspose: TransposePrim(p); break;
      case ConvKind::kFilterGrad: FilterGradPrim(p); break;
    }
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

// Whether the call needs no primitive: an empty output, or an empty input
// (MakePlan declines a forward one with a non-empty output; a filter
// gradient from an empty input is zero; a transposed convolution's input
// is empty only with an empty batch, hence an empty output).
bool Trivial(const dg::KernelContext& ctx) {
  return ctx.output(0).numel() == 0 || ctx.input(0).numel() == 0;
}

template <ConvKind kKind>
int32_t Supports(const DgCallFrame* f) {
  if (!AllDTypes(f, kF32Bf16) || !NonNegativeStrides(f)) return 0;
  const dg::KernelContext ctx(f);
  ConvPlan p;
  try {
    if (!MakePlan(ctx, kKind, &p)) return 0;
    return Trivial(ctx) || HasPrimitive(p) ? 1 : 0;
  } catch (...) {  // a bad attribute or dtype: decline, never throw
    return 0;
  }
}

// An input tensor in the layout `want` (a workspace copy when it differs).
memory Input(const dg::KernelContext& ctx, const memory::desc& have,
             const dg::TensorRef& t, const memory::desc& want) {
  return Reorder(ctx, Memory(have, t), want);
}

// Weights reordered once per call site of a compiled graph (ABI 1.2 call-
// site state): when the weights are a constant of the graph (a frozen
// parameter, a batch-norm-folded value), the first run reorders them into
// the primitive's layout and later runs reuse that copy, as onnxruntime
// pre-packs its initializers. The copy is keyed by the source's address and
// the wanted layout, so a new address (the core promises it never changes
// for a constant; this only guards) or another primitive layout (another
// thread count) reorders again. Eager calls and non-constant weights take
// the per-call reorder.
struct PackedWeights {
  const void* source = nullptr;
  memory::desc want;
  memory packed;  // owns its buffer (oneDNN's allocation)
};

memory WeightsInput(const dg::KernelContext& ctx, const memory::desc& have,
                    const dg::TensorRef& w, const memory::desc& want) {
  if (have == want || !ctx.input_is_constant(1)) return Input(ctx, have, w, want);
  PackedWeights* cache = ctx.call_site_data<PackedWeights>();
  const void* source = w.raw_data();
  if (cache->source != source || cache->want != want || !cache->packed) {
    memory packed(want, Engine());  // oneDNN allocates and frees it
    CopyInto(ctx, Memory(have, w), packed);
    cache->packed = packed;
    cache->want = want;
    cache->source = source;
  }
  return cache->packed;
}

// Where the primitive writes the output t (seen as t_desc): t itself when
// `want` is that layout, else a workspace buffer that CopyOut() copies into t.
memory OutputBuffer(const dg::KernelContext& ctx, const dg::TensorRef& t,
                    const memory::desc& t_desc, const memory::desc& want) {
  if (want == t_desc) return Memory(t_desc, t);
  return Scratch(ctx, want);
}

// How an activation tensor lies in memory: its strided NCHW view, or for a
// dense [N, C/16, H, W, 16] tensor of the blocked ops nChw16c.
memory::desc ActivationDesc(const dg::TensorRef& t) {
  return t.ndim() == 5 ? Nchw16cDesc(PlainDims(t), DataType(t.dtype())) : Desc(t);
}

// Runs a forward convolution or deconvolution: src x, weights w, optional
// bias, dst y.
template <typename PD>
void RunForward(const dg::KernelContext& ctx, const ConvPlan& p,
                const Prim<PD>& prim) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  const PD& pd = *prim.pd;
  const memory::desc x_desc = ActivationDesc(x), y_desc = ActivationDesc(y);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = Input(ctx, x_desc, x, pd.src_desc());
  args[DNNL_ARG_WEIGHTS] = WeightsInput(ctx, FilterDesc(w, p), w, pd.weights_desc());
  if (p.bias) {
    const dg::TensorRef b = ctx.input(2);
    args[DNNL_ARG_BIAS] = Input(ctx, Desc(b), b, pd.bias_desc());
  }
  const memory dst = OutputBuffer(ctx, y, y_desc, pd.dst_desc());
  args[DNNL_ARG_DST] = dst;
  Execute(ctx, prim.prim, pd, std::move(args));
  CopyOut(ctx, dst, Memory(y_desc, y));
  if (p.relu) ReluKeepNan(ctx.output(0));
}

// The plan of a call supports() accepted (so it cannot fail).
ConvPlan PlanFor(const dg::KernelContext& ctx, ConvKind kind) {
  ConvPlan p;
  DG_CHECK(MakePlan(ctx, kind, &p), DG_INTERNAL, ctx.op_name(),
           ": call not supported by mkldnn (supports() should have declined)");
  return p;
}

// Conv2d and Conv2dBiasAct.
void ConvForwardK(dg::KernelContext& ctx) {
  const ConvPlan p = PlanFor(ctx, ConvKind::kForward);
  if (Trivial(ctx)) return;
  if (p.gemm) return GemmConvForward(ctx, p.geo);
  RunForward(ctx, p, ForwardPrim(p));
}

void ConvTransposeK(dg::KernelContext& ctx) {
  const ConvPlan p = PlanFor(ctx, ConvKind::kTranspose);
  if (Trivial(ctx)) return;
  if (p.gemm) return GemmConvBackwardData(ctx, p.geo);
  RunForward(ctx, p, TransposePrim(p));
}

void FilterGradK(dg::KernelContext& ctx) {
  const ConvPlan p = PlanFor(ctx, ConvKind::kFilterGrad);
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dw = ctx.output(0);
  if (dw.numel() == 0) return;
  if (x.numel() == 0) {  // every tap reads padding, or no image at all
    std::memset(dw.raw_data(), 0, dw.numel() * memory::data_type_size(p.dt));
    return;
  }
  if (p.gemm) return GemmConvFilterGrad(ctx, p.geo);
  const auto prim = FilterGradPrim(p);
  const auto& pd = *prim.pd;
  const memory::desc dw_desc = FilterDesc(dw, p);
  const memory dst = OutputBuffer(ctx, dw, dw_desc, pd.diff_weights_desc());
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, Input(ctx, Desc(x), x, pd.src_desc())},
      {DNNL_ARG_DIFF_DST, Input(ctx, Desc(dy), dy, pd.diff_dst_desc())},
      {DNNL_ARG_DIFF_WEIGHTS, dst}};
  // oneDNN's bfloat16 backward-weights kernel (jit_bf16:avx512_core_bf16)
  // accumulates in float32 in its scratchpad and never writes the entries of
  // taps that read only padding (kw 3, pad 2 on a 1-wide image): whatever
  // the core's workspace held before (another kernel's data) came out as the
  // gradient. The scratchpad and the destination start at zero here (a
  // filter's size, per thread at most), so Execute() is not used.
  std::memset(dst.get_data_handle(), 0, pd.diff_weights_desc().get_size());
  const memory::desc sd = pd.scratchpad_desc();
  if (sd.get_size() > 0) {
    uint8_t* pad = ctx.workspace<uint8_t>(sd.get_size());
    std::memset(pad, 0, sd.get_size());
    args[DNNL_ARG_SCRATCHPAD] = memory(sd, Engine(), pad);
  }
  prim.prim.execute(Stream(), args);
  Stream().wait();  // the outputs and the workspace are final on return
  CopyOut(ctx, dst, Memory(dw_desc, dw));
}

// Registers FUNC for float32 and bfloat16 with SUPPORTS, reading strided
// inputs in place.
#define MKLDNN_CONV_KERNEL(OP, FUNC, KIND)                                  \
  [[maybe_unused]] static int DG_UNIQUE_(mkldnn_conv_) =                    \
      ::dg::internal::AddKernel(OP, "cpu", kF32Bf16, kPriority,             \
                                DG_KERNEL_STRIDED_INPUTS, "mkldnn::" #FUNC, \
                                &FUNC, &Supports<KIND>)

MKLDNN_CONV_KERNEL("Conv2d", ConvForwardK, ConvKind::kForward);
MKLDNN_CONV_KERNEL("Conv2dBiasAct", ConvForwardK, ConvKind::kForward);
// The blocked op reads its 5-D input as dense nChw16c (ActivationDesc), so
// it takes no strided inputs: the core makes a strided one dense first.
[[maybe_unused]] static int kBlockedConv = ::dg::internal::AddKernel(
    "Conv2dNchw16c", "cpu", dg::Bit(DG_FLOAT32), kPriority, 0,
    "mkldnn::Conv2dNchw16c", &ConvForwardK, &Supports<ConvKind::kForward>);
MKLDNN_CONV_KERNEL("ConvTranspose2d", ConvTransposeK, ConvKind::kTranspose);
MKLDNN_CONV_KERNEL("Conv2dBackpropFilter", FilterGradK, ConvKind::kFilterGrad);

}  // namespace
}  // namespace mkldnn_plugin
