// MatMul and MatMulBiasAct on oneDNN's matmul primitive (float32, bfloat16).
//
// The core's schema (dragon_core/src/ops/linalg.cc) has NumPy matmul
// semantics; this file maps one call onto a single oneDNN matmul, reading
// the operands in place whenever oneDNN can:
//   * a 1-D a is the row [1, k], a 1-D b the column [k, 1]; matrix @ vector
//     runs transposed (b^T a^T) so the output lies along oneDNN's n axis;
//   * transpose_a / transpose_b swap the strides of the last two axes;
//   * batch axes are aligned from the right; an axis of extent 1 on one side
//     is broadcast by oneDNN itself;
//   * every operand is described by its own strides (sliced views are read
//     in place), so a matrix needs a unit stride along one of its two axes;
//   * MatMulBiasAct adds the bias through oneDNN's bias argument (along the
//     output's last axis); the relu is a NaN-keeping pass over the output
//     (oneDNN's relu post-op maps NaN to 0, the core's Relu keeps it).
// An operand oneDNN cannot read in place (a matrix with no unit stride, or
// a layout for which oneDNN only has its slow reference loop) is packed
// into a dense copy first, by a oneDNN reorder (visible in ONEDNN_VERBOSE);
// what cannot be expressed at all (rank > 12, mixed dtypes, negative
// strides) is declined by Supports(), so the core picks cpu_eigen and
// explain() says so. A product with an empty inner axis (k = 0) is filled
// here with act(0 + bias); an empty output needs no work.
// See plugins/mkldnn/docs/matmul.md.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

namespace mkldnn_plugin {
namespace {

// oneDNN's limit on the rank of a memory descriptor.
constexpr int kMaxRank = DNNL_MAX_NDIMS;

// Products with fewer multiply-adds run on one thread: below this, an
// OpenMP fork/join (a few microseconds, far more on a loaded machine) costs
// more than the product (64 x 64 x 32 is ~10 us on one AVX-512 core).
constexpr int64_t kSerialWork = int64_t{1} << 20;

// A strided view with at most kMaxRank axes, without heap allocation.
struct View {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  dnnl::memory::desc ToDesc(dnnl::memory::data_type dt) const {
    return dnnl::memory::desc(dnnl::memory::dims(dims, dims + rank), dt,
                              dnnl::memory::dims(strides, strides + rank));
  }
};

// One call as oneDNN sees it: a [..., m, k] @ b [..., k, n] -> y [..., m, n]
// (all of rank `rank`), and the optional bias as [1, ..., 1, n].
struct Problem {
  DgDType dtype = DG_FLOAT32;
  // y's (and the bias's) dtype: the operands' or, with out_dtype, float32
  // from bfloat16 operands (oneDNN's bf16 x bf16 -> f32 destination).
  DgDType out_dtype = DG_FLOAT32;
  View a, b, y, bias;
  bool has_bias = false, relu = false;
  // matrix @ vector runs as (b^T a^T): oneDNN's src is input 1.
  bool swap = false;
  // The operands as stored (logical dims, their own strides); a and b are
  // these, or dense copies of them (pack_a, pack_b: see Resolve()).
  View src_a, src_b;
  bool pack_a = false, pack_b = false;
  int threads = 1;  // OpenMP threads of the primitive (see Threads())
  int64_t m = 0, n = 0, k = 0;
};

// Fills dims/strides of a matrix operand: the tensor's last two axes
// (transposed when asked) or, for a 1-D tensor, a row (a) or column (b).
// Returns whether oneDNN can read it in place (a unit stride along one
// axis, the other at least the matrix's extent).
bool MatrixView(const DgTensorView* t, bool is_a, bool transpose, View* v) {
  const int nd = t->ndim;
  int64_t r, c, sr, sc;
  if (nd == 1) {
    const int64_t len = t->shape[0], s = t->strides[0];
    if (is_a) {
      r = 1, c = len, sr = len * s, sc = s;
    } else {
      r = len, c = 1, sr = s, sc = 1;
    }
    transpose = false;
  } else {
    r = t->shape[nd - 2], c = t->shape[nd - 1];
    sr = t->strides[nd - 2], sc = t->strides[nd - 1];
  }
  if (transpose) std::swap(r, c), std::swap(sr, sc);
  if (r == 0 || c == 0) sr = std::max<int64_t>(c, 1), sc = 1;  // no data
  // An axis of extent 1 has no meaningful stride: give it the one a dense
  // layout would have, so oneDNN recognises the plain or transposed format.
  if (c == 1) sc = 1;
  if (r == 1) sr = (sc == 1) ? std::max<int64_t>(c, 1) : 1;
  const bool row_major = sc == 1 && sr >= std::max<int64_t>(c, 1);
  const bool col_major = sr == 1 && sc >= std::max<int64_t>(r, 1);
  v->dims[v->rank - 2] = r, v->dims[v->rank - 1] = c;
  v->strides[v->rank - 2] = sr, v->strides[v->rank - 1] = sc;
  return row_major || col_major;
}

// Batch axes of t (all but its last two; none for 1-D) right-aligned into
// v's first rank-2 axes, extent-1 and missing axes broadcast.
void BatchView(const DgTensorView* t, View* v) {
  const int nb = v->rank - 2, tb = std::max(t->ndim - 2, 0);
  for (int i = 0; i < nb; ++i) {
    const int j = i - (nb - tb);
    v->dims[i] = j >= 0 ? t->shape[j] : 1;
    v->strides[i] = j >= 0 ? t->strides[j] : 0;
  }
  // Strides of extent-1 axes (ignored) as a dense layout would have them.
  for (int i = nb - 1; i >= 0; --i) {
    if (v->dims[i] != 1) continue;
    int64_t span = 1;
    for (int j = i + 1; j < v->rank; ++j) {
      span = std::max(span, v->dims[j] * v->strides[j]);
    }
    v->strides[i] = span;
  }
}

// A batch axis an operand repeats with stride 0 (an expanded view) is
// oneDNN's broadcast, extent 1, when the other operand keeps the output's
// extent there (oneDNN takes the output's batch from the operands).
void BroadcastRepeatedAxes(View* v, const View& other, const View& y) {
  for (int i = 0; i + 2 < v->rank; ++i) {
    if (v->strides[i] == 0 && v->dims[i] > 1 && other.dims[i] == y.dims[i]) {
      v->dims[i] = 1;
    }
  }
}

// Whether no stride is negative (oneDNN descriptors cannot hold one).
bool NonNegative(const View& v) {
  for (int i = 0; i < v.rank; ++i) {
    if (v.strides[i] < 0) return false;
  }
  return true;
}

// A dense row-major view of `rank` axes.
void DenseStrides(View* v) {
  int64_t s = 1;
  for (int i = v->rank - 1; i >= 0; --i) {
    v->strides[i] = s;
    s *= std::max<int64_t>(v->dims[i], 1);
  }
}

// Builds the problem for a call; returns false (with nothing else done)
// when oneDNN's matmul cannot express it. Shapes were checked by the
// schema's shape rule; only what the kernel relies on is re-checked.
bool Describe(const DgCallFrame* f, Problem* p) {
  if (f->num_inputs < 2 || f->num_outputs != 1) return false;
  const DgTensorView *at = f->inputs[0], *bt = f->inputs[1];
  const DgTensorView* yt = f->outputs[0];
  if (!at || !bt || at->ndim < 1 || bt->ndim < 1) return false;
  p->dtype = static_cast<DgDType>(at->dtype);
  p->out_dtype = static_cast<DgDType>(yt->dtype);
  if (!(kF32Bf16 & dg::Bit(p->dtype)) || bt->dtype != at->dtype ||
      !(yt->dtype == at->dtype ||
        (p->dtype == DG_BFLOAT16 && yt->dtype == DG_FLOAT32))) {
    return false;
  }
  const int rank = std::max({at->ndim, bt->ndim, 2});
  if (rank > kMaxRank) return false;
  const dg::AttrReader attrs(f->num_attrs, f->attrs, f->attr_names,
                             f->op_name);
  p->a.rank = p->b.rank = p->y.rank = rank;
  // matrix @ vector runs as its transpose, the row b^T times a^T: the
  // output (and a bias) then lies along oneDNN's n axis, which is where
  // its optimised kernels take a bias.
  const bool swap = p->swap = bt->ndim == 1 && at->ndim > 1;
  const DgTensorView* lhs = swap ? bt : at;
  const DgTensorView* rhs = swap ? at : bt;
  const bool ta = attrs.b("transpose_a"), tb = attrs.b("transpose_b");
  p->pack_a = !MatrixView(lhs, true, swap ? false : ta, &p->a);
  p->pack_b = !MatrixView(rhs, false, swap ? !ta : tb, &p->b);
  BatchView(lhs, &p->a);
  BatchView(rhs, &p->b);
  p->m = p->a.dims[rank - 2], p->k = p->a.dims[rank - 1];
  p->n = p->b.dims[rank - 1];
  if (p->b.dims[rank - 2] != p->k) return false;
  int64_t count = p->m * p->n;
  for (int i = 0; i < rank - 2; ++i) {
    const int64_t da = p->a.dims[i], db = p->b.dims[i];
    if (da != db && da != 1 && db != 1) return false;
    p->y.dims[i] = (da == 0 || db == 0) ? 0 : std::max(da, db);
    count *= p->y.dims[i];
  }
  p->y.dims[rank - 2] = p->m, p->y.dims[rank - 1] = p->n;
  DenseStrides(&p->y);  // the core allocates outputs dense
  BroadcastRepeatedAxes(&p->a, p->b, p->y);
  BroadcastRepeatedAxes(&p->b, p->a, p->y);
  if (!NonNegative(p->a) || !NonNegative(p->b)) return false;
  p->src_a = p->a, p->src_b = p->b;
  if (p->pack_a) DenseStrides(&p->a);
  if (p->pack_b) DenseStrides(&p->b);
  p->threads = Threads(f, count * p->k, kSerialWork);
  int64_t y_count = 1;
  for (int i = 0; i < yt->ndim; ++i) y_count *= yt->shape[i];
  if (y_count != count) return false;

  p->has_bias = f->num_inputs > 2 && f->inputs[2] != nullptr;
  if (std::strcmp(f->op_name, "MatMulBiasAct") == 0) {
    const std::string act = attrs.s("activation");
    if (act != "none" && act != "relu") return false;
    p->relu = act == "relu";
  }
  if (p->has_bias) {
    const DgTensorView* bias = f->inputs[2];
    // The bias runs along y's last axis, oneDNN's n (see the swap above).
    if (bias->dtype != yt->dtype || bias->ndim != 1 ||
        bias->shape[0] != p->n) {
      return false;
    }
    p->bias.rank = rank;
    for (int i = 0; i < rank; ++i) p->bias.dims[i] = 1;
    p->bias.dims[rank - 1] = p->n;
    DenseStrides(&p->bias);  // read from a dense copy when strided
  }
  return true;
}

// The cache key: dtype, flags, thread count and every dim and stride.
FastKey ProblemKey(const Problem& p) {
  FastKey key("matmul");
  key << static_cast<int64_t>(p.dtype) << static_cast<int64_t>(p.out_dtype)
      << (p.relu ? 1 : 0)
      << (p.has_bias ? 1 : 0) << p.threads << p.a.rank
      << (p.pack_a ? 1 : 0) << (p.pack_b ? 1 : 0);
  for (const View* v : {&p.a, &p.b}) {
    key.Add(v->dims, v->rank).Add(v->strides, v->rank);
  }
  key.Add(p.y.dims, p.y.rank);
  return key;  // (swap changes no descriptor: the same product either way)
}

// Which of oneDNN's float32 matmul implementations runs a product.
// oneDNN 3.2 offers its brgemm kernel ("brg:avx512_core") first on AVX-512
// CPUs, and its JIT GEMM ("gemm:jit", the sgemm engine) after it. The JIT
// GEMM is the faster of the two on large products (brgemm's time / its, on
// an Emerald Rapids host): 0.97-1.07 on 1024^3, 1.04-1.22 on 2048^3 and
// 4096^3, 2.0-2.2 on 1536^3 and 3000^3 where brgemm's tail blocks are slow;
// it runs at 0.96-1.05x MKL's time where brgemm runs at 0.82-0.89x
// (docs/matmul.md, "Performance"). On smaller products and on the
// transformer shapes with a 256 axis neither wins everywhere, so brgemm
// (oneDNN's own choice) stays. DRAGON_MKLDNN_JIT_GEMM (read once): "auto"
// (default) applies LargeFloat32Product below, "on" takes the JIT GEMM for
// every float32 product it serves, "off" never.
enum class JitGemm { kAuto, kOn, kOff };

JitGemm JitGemmMode() {
  static const JitGemm mode = [] {
    const char* env = std::getenv("DRAGON_MKLDNN_JIT_GEMM");
    const std::string v = env ? env : "auto";
    if (v == "on") return JitGemm::kOn;
    if (v == "off") return JitGemm::kOff;
    if (v != "auto") {
      std::fprintf(stderr,
                   "dragon mkldnn: DRAGON_MKLDNN_JIT_GEMM=%s is not one of "
                   "auto, on, off; using auto\n",
                   v.c_str());
    }
    return JitGemm::kAuto;
  }();
  return mode;
}

// A single float32 product (no batch) with every axis at least 512 and at
// least 2^30 multiply-adds (1024^3, 2048 x 512 x 1024): the class where the
// JIT GEMM measured as fast as brgemm or faster (by up to 2.2x) in 23 of
// the 26 cases tried, and at most 3% slower in the other three.
bool LargeFloat32Product(const Problem& p) {
  for (int i = 0; i + 2 < p.y.rank; ++i) {
    if (p.y.dims[i] != 1) return false;
  }
  return std::min({p.m, p.n, p.k}) >= 512 &&
         p.m * p.n * p.k >= (int64_t{1} << 30);
}

bool WantsJitGemm(const Problem& p) {
  if (p.dtype != DG_FLOAT32 || p.out_dtype != DG_FLOAT32) return false;
  const JitGemm mode = JitGemmMode();
  return mode == JitGemm::kOn ||
         (mode == JitGemm::kAuto && LargeFloat32Product(p));
}

dnnl::matmul::primitive_desc MakeMatMul(const Problem& p) {
  const dnnl::memory::data_type dt = DataType(p.dtype);
  const dnnl::memory::data_type yt = DataType(p.out_dtype);
  dnnl::primitive_attr attr = Attr();
  const auto make = [&] {
    if (p.has_bias) {
      return dnnl::matmul::primitive_desc(Engine(), p.a.ToDesc(dt),
                                          p.b.ToDesc(dt), p.bias.ToDesc(yt),
                                          p.y.ToDesc(yt), attr);
    }
    return dnnl::matmul::primitive_desc(Engine(), p.a.ToDesc(dt),
                                        p.b.ToDesc(dt), p.y.ToDesc(yt), attr);
  };
  dnnl::matmul::primitive_desc pd = make();
  if (!WantsJitGemm(p)) return pd;
  // Walk oneDNN's list of implementations to the JIT GEMM; where it has
  // none for this problem (a layout it does not take), oneDNN's first
  // choice stays.
  dnnl::matmul::primitive_desc walk = make();
  do {
    if (std::strncmp(walk.impl_info_str(), "gemm:jit", 8) == 0) return walk;
  } while (walk.next_impl());
  return pd;
}

// Element i of a float32 or bfloat16 array, as float.
float LoadFloat(const void* data, DgDType dt, int64_t i) {
  if (dt == DG_FLOAT32) return static_cast<const float*>(data)[i];
  const uint32_t bits = static_cast<uint32_t>(
                            static_cast<const uint16_t*>(data)[i])
                        << 16;
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// Stores v (exactly representable in dt here) as element i.
void StoreFloat(void* data, DgDType dt, int64_t i, float v) {
  if (dt == DG_FLOAT32) {
    static_cast<float*>(data)[i] = v;
    return;
  }
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(v));
  static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(bits >> 16);
}

// k = 0: every product is the empty sum 0, so y = act(0 + bias). (Values
// are zeros or bias elements, exactly representable in either dtype.)
void FillEmptyProduct(const dg::KernelContext& ctx, const Problem& p) {
  const dg::TensorRef y = ctx.output(0);
  void* out = y.raw_data();
  const int64_t total = y.numel();
  if (!p.has_bias) {
    std::memset(out, 0, total * dg::DTypeSize(p.out_dtype));
    return;
  }
  const dg::TensorRef bias = ctx.input(2);
  const int64_t len = bias.dim(0), stride = bias.stride(0);
  // The bias runs along y's last axis: element i of y uses bias[i % len].
  for (int64_t i = 0; i < total; ++i) {
    const float v = LoadFloat(bias.raw_data(), p.out_dtype, (i % len) * stride);
    StoreFloat(out, p.out_dtype, i, p.relu ? std::max(v, 0.f) : v);
  }
}

using MatMulPd = dnnl::matmul::primitive_desc;

// Whether oneDNN only offers its reference implementation (a plain loop
// nest, orders of magnitude slower than cpu_eigen's GEMM) for a problem.
bool IsReference(const MatMulPd& pd) {
  return std::strncmp(pd.impl_info_str(), "ref", 3) == 0;
}

// The cached primitive for p. Problems oneDNN rejects or serves only with
// its reference implementation are cached as empty entries (pd == null), so
// the answer costs one lookup after the first call.
Prim<MatMulPd> Lookup(const Problem& p, const FastKey& key) {
  PrimitiveCache::Entry e = PrimitiveCache::Get().Lookup(key.view(), [&] {
    const OmpThreads threads(p.threads);
    try {
      auto pd = std::make_shared<const MatMulPd>(MakeMatMul(p));
      if (IsReference(*pd)) return PrimitiveCache::Entry{};
      return PrimitiveCache::Entry{dnnl::matmul(*pd), pd};
    } catch (const dnnl::error&) {
      return PrimitiveCache::Entry{};
    }
  });
  return {e.prim, std::static_pointer_cast<const MatMulPd>(e.pd)};
}

// The primitive for p. When oneDNN has no optimised implementation that
// reads the operands in place (some strided batches, mostly in bfloat16),
// both operands are packed into dense copies (a oneDNN reorder into the
// workspace) and p says so. A null pd: no primitive at all (declined).
Prim<MatMulPd> Resolve(Problem* p) {
  Prim<MatMulPd> prim = Lookup(*p, ProblemKey(*p));
  if (prim.pd || (p->pack_a && p->pack_b)) return prim;
  p->pack_a = p->pack_b = true;
  DenseStrides(&p->a);
  DenseStrides(&p->b);
  return Lookup(*p, ProblemKey(*p));
}

// This thread's most recently used primitives, bound to their memory
// objects (a network's layers alternate a few shapes). Searched before the
// shared cache: a repeated call takes no lock and allocates nothing. It
// holds every product of a training step: a transformer layer's step runs
// 21 MatMuls of about 15 distinct problems (forward, input and weight
// gradients, the attention products), and an entry replaced in turn (as
// with the 8 entries this had before) missed on nearly every call, each
// miss a shared-cache lookup under its lock plus a Bind (new oneDNN memory
// objects), in supports() and again in the kernel. Searched from the most
// recent entry, so a layer's repeated shape is found first.
class Memo {
 public:
  BoundPrimitive* Find(std::string_view key) {
    for (int j = 0; j < kSize; ++j) {
      const int i = (next_ + kSize - 1 - j) % kSize;
      if (bound_[i].valid() && keys_[i] == key) return &bound_[i];
    }
    return nullptr;
  }
  BoundPrimitive* Insert(std::string_view key, BoundPrimitive b) {
    const int i = next_;
    next_ = (next_ + 1) % kSize;
    keys_[i].assign(key);
    bound_[i] = std::move(b);
    return &bound_[i];
  }

 private:
  static constexpr int kSize = 32;
  std::string keys_[kSize];
  BoundPrimitive bound_[kSize];
  int next_ = 0;
};

Memo& ThreadMemo() {
  thread_local Memo memo;
  return memo;
}

// Whether the call needs no product: an empty output, or k = 0.
bool Trivial(const DgCallFrame* f, const Problem& p) {
  const DgTensorView* y = f->outputs[0];
  for (int i = 0; i < y->ndim; ++i) {
    if (y->shape[i] == 0) return true;
  }
  return p.k == 0;
}

// The bias's data, packed densely into the workspace when it is a strided
// view (the primitive's bias descriptor is always dense).
const void* BiasData(const dg::KernelContext& ctx) {
  const dg::TensorRef bias = ctx.input(2);
  const int64_t len = bias.dim(0), stride = bias.stride(0);
  if (stride == 1 || len <= 1) return bias.raw_data();
  const size_t size = dg::DTypeSize(bias.dtype());
  char* packed = ctx.workspace<char>(size * len);
  const char* src = static_cast<const char*>(bias.raw_data());
  for (int64_t i = 0; i < len; ++i) {
    std::memcpy(packed + i * size, src + i * stride * size, size);
  }
  return packed;
}

// Input `index` as the primitive reads it: in place, or packed from its
// stored view `src` into the dense `dense` in the workspace.
const void* OperandData(const dg::KernelContext& ctx, int index, bool pack,
                        const View& src, const View& dense, DgDType dtype) {
  const dg::TensorRef t = ctx.input(index);
  if (!pack) return t.raw_data();
  const dnnl::memory::data_type dt = DataType(dtype);
  return Reorder(ctx, Memory(src.ToDesc(dt), t), dense.ToDesc(dt))
      .get_data_handle();
}

// prim bound to memory objects for this thread.
BoundPrimitive Bind(const dg::KernelContext& ctx, const Problem& p,
                    const Prim<MatMulPd>& prim) {
  DG_CHECK(prim.pd != nullptr, DG_INTERNAL, ctx.op_name(),
           ": oneDNN has no primitive for a call supports() accepted");
  const MatMulPd& pd = *prim.pd;
  std::vector<std::pair<int, dnnl::memory::desc>> args{
      {DNNL_ARG_SRC, pd.src_desc()},
      {DNNL_ARG_WEIGHTS, pd.weights_desc()},
      {DNNL_ARG_DST, pd.dst_desc()}};
  if (p.has_bias) {
    args.emplace_back(DNNL_ARG_BIAS, pd.query_md(dnnl::query::weights_md, 1));
  }
  return BoundPrimitive(prim.prim, prim.pd, pd, args);
}

void RunMatMul(dg::KernelContext& ctx) {
  Problem p;
  DG_CHECK(Describe(ctx.frame(), &p), DG_INTERNAL, ctx.op_name(),
           ": the mkldnn kernel was chosen for a call its supports() "
           "declines");
  if (Trivial(ctx.frame(), p)) {
    if (ctx.output(0).numel() > 0) FillEmptyProduct(ctx, p);
    return;
  }
  Memo& memo = ThreadMemo();
  BoundPrimitive* bound = memo.Find(ProblemKey(p).view());
  if (!bound) {
    const Prim<MatMulPd> prim = Resolve(&p);  // may switch to packing
    const FastKey key = ProblemKey(p);
    bound = memo.Find(key.view());
    if (!bound) bound = memo.Insert(key.view(), Bind(ctx, p, prim));
  }
  const int ia = p.swap ? 1 : 0, ib = p.swap ? 0 : 1;
  const void* data[4] = {OperandData(ctx, ia, p.pack_a, p.src_a, p.a, p.dtype),
                         OperandData(ctx, ib, p.pack_b, p.src_b, p.b, p.dtype),
                         ctx.output(0).raw_data(),
                         p.has_bias ? BiasData(ctx) : nullptr};
  const OmpThreads threads(p.threads);
  bound->Run(ctx, data);
  if (p.relu) ReluKeepNan(ctx.output(0));
}

// supports(): the layout and dtypes oneDNN can take, and a primitive that
// is not oneDNN's reference loop. Never throws. The first call for a shape
// builds (and caches) the primitive the kernel then uses.
int32_t Supports(const DgCallFrame* f) {
  try {
    Problem p;
    if (!Describe(f, &p)) return 0;
    if (Trivial(f, p)) return 1;
    if (ThreadMemo().Find(ProblemKey(p).view())) return 1;
    return Resolve(&p).pd != nullptr;
  } catch (...) {
    return 0;
  }
}

// ------------------------------------------------------------ MatMulBiasAdd

// MatMulBiasAdd (dragon_core/src/ops/matmul_bias_add.cc, written by the
// linear_epilogue graph pass) on oneDNN, bfloat16 operands: the product as
// MatMul(a, b; out_dtype=float32) computes it here (the same Describe, so
// the same primitive and bits) into float32 scratch, then one pass over
// it: + bias[c], then + residual (when given), in float32 as the Adds, and
// a bfloat16 y rounded as the Cast kernel rounds (nearest even on the
// bits, a NaN the quiet NaN of its sign, denormals kept). So the result is
// bit for bit the chain the pass replaced when this plugin runs its
// MatMul, which it does wherever oneDNN ranks first for bfloat16 products
// (CPUs with AMX, where cpu_eigen's AVX512-BF16 GEMM ranks below it; see
// plugins/cpu_eigen/src/matmul_bf16.cc). The float32 product still goes to
// memory, but the bias, residual and Cast passes become one.
struct ProductCall {
  int64_t shape[2] = {}, strides[2] = {};
  DgTensorView y{};
  const DgTensorView* inputs[2] = {};
  const DgTensorView* outputs[1] = {};
  DgCallFrame frame{};
};

// The frame of the product alone: MatMul(a, b) into a dense float32 [n, m]
// at `scratch` (null for supports(), which reads no data).
void ProductFrame(const DgCallFrame* f, void* scratch, ProductCall* c) {
  const dg::AttrReader attrs(f->num_attrs, f->attrs, f->attr_names, f->op_name);
  const DgTensorView *at = f->inputs[0], *bt = f->inputs[1];
  const bool ta = attrs.b("transpose_a"), tb = attrs.b("transpose_b");
  c->shape[0] = at->ndim == 2 ? at->shape[ta ? 1 : 0] : 0;
  c->shape[1] = bt->ndim == 2 ? bt->shape[tb ? 0 : 1] : 0;
  c->strides[0] = c->shape[1], c->strides[1] = 1;
  c->y = *f->outputs[0];
  c->y.struct_size = sizeof(DgTensorView);
  c->y.dtype = DG_FLOAT32;
  c->y.data = scratch;
  c->y.byte_offset = 0;
  c->y.ndim = 2;
  c->y.shape = c->shape;
  c->y.strides = c->strides;
  c->inputs[0] = at, c->inputs[1] = bt;
  c->outputs[0] = &c->y;
  c->frame = *f;
  c->frame.op_name = "MatMul";
  c->frame.num_inputs = 2;
  c->frame.inputs = c->inputs;
  c->frame.num_outputs = 1;
  c->frame.outputs = c->outputs;
}

// Whether the call is one this kernel takes: 2-D bfloat16 operands, a
// float32 bias [m] and residual of y's size, y float32 or bfloat16, and a
// product oneDNN's matmul runs (Supports of the product alone).
int32_t SupportsBiasAdd(const DgCallFrame* f) {
  try {
    if (f->num_inputs < 3 || f->num_outputs != 1) return 0;
    const DgTensorView *at = f->inputs[0], *bt = f->inputs[1], *bias = f->inputs[2];
    const DgTensorView* yt = f->outputs[0];
    if (!at || !bt || !bias || !yt || at->ndim != 2 || bt->ndim != 2) return 0;
    if (at->dtype != DG_BFLOAT16 || bt->dtype != DG_BFLOAT16) return 0;
    if (yt->dtype != DG_FLOAT32 && yt->dtype != DG_BFLOAT16) return 0;
    if (bias->dtype != DG_FLOAT32 || bias->ndim != 1) return 0;
    ProductCall c;
    ProductFrame(f, nullptr, &c);
    if (bias->shape[0] != c.shape[1]) return 0;
    int64_t count = 1;
    for (int i = 0; i < yt->ndim; ++i) count *= yt->shape[i];
    if (count != c.shape[0] * c.shape[1]) return 0;
    if (f->num_inputs > 3 && f->inputs[3] != nullptr) {
      const DgTensorView* r = f->inputs[3];
      int64_t rc = 1;
      for (int i = 0; i < r->ndim; ++i) rc *= r->shape[i];
      if (r->dtype != DG_FLOAT32 || rc != count) return 0;
    }
    return Supports(&c.frame);
  } catch (...) {
    return 0;
  }
}

// A float's bfloat16 bits as the Cast kernel rounds them.
inline uint16_t CastToBfloat16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if (v != v) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void RunMatMulBiasAdd(dg::KernelContext& ctx) {
  // supports() accepted the call; RunMatMul checks the product again.
  const DgCallFrame* f = ctx.frame();
  ProductCall c;
  ProductFrame(f, nullptr, &c);
  const int64_t n = c.shape[0], m = c.shape[1];
  if (n * m == 0) return;
  float* prod = ctx.workspace<float>(static_cast<size_t>(n * m));
  c.y.data = prod;
  dg::KernelContext product(&c.frame);
  RunMatMul(product);

  const dg::TensorRef bias = ctx.input(2);
  const float* pb = bias.data<const float>();
  const int64_t bs = bias.stride(0);
  // The residual, read row-major in y's shape through its own strides
  // (a strided view is gathered into the workspace first).
  const float* res = nullptr;
  if (ctx.num_inputs() > 3 && f->inputs[3] != nullptr) {
    const dg::TensorRef r = ctx.input(3);
    if (r.is_contiguous()) {
      res = r.data<const float>();
    } else {
      float* dense = ctx.workspace<float>(static_cast<size_t>(n * m));
      const float* src = r.data<const float>();
      const int nd = r.ndim();
      std::vector<int64_t> idx(nd, 0);
      int64_t off = 0;
      for (int64_t i = 0; i < n * m; ++i) {
        dense[i] = src[off];
        for (int d = nd - 1; d >= 0; --d) {
          off += r.stride(d);
          if (++idx[d] < r.dim(d)) break;
          off -= r.stride(d) * r.dim(d);
          idx[d] = 0;
        }
      }
      res = dense;
    }
  }
  const bool f32 = ctx.output(0).dtype() == DG_FLOAT32;
  void* out = ctx.output(0).raw_data();
  const int threads = Threads(f, n * m, kSerialWork / 16);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = prod + i * m;
    const float* rrow = res ? res + i * m : nullptr;
    if (f32) {
      float* y = static_cast<float*>(out) + i * m;
      for (int64_t j = 0; j < m; ++j) {
        float v = row[j] + pb[j * bs];
        if (rrow) v = v + rrow[j];
        y[j] = v;
      }
    } else {
      uint16_t* y = static_cast<uint16_t*>(out) + i * m;
      for (int64_t j = 0; j < m; ++j) {
        float v = row[j] + pb[j * bs];
        if (rrow) v = v + rrow[j];
        y[j] = CastToBfloat16(v);
      }
    }
  }
}

[[maybe_unused]] const int kRegistered[] = {
    dg::internal::AddKernel("MatMulBiasAdd", "cpu", dg::Bit(DG_BFLOAT16), kPriority,
                            DG_KERNEL_STRIDED_INPUTS, "MatMulBiasAddOneDNN",
                            &RunMatMulBiasAdd, &SupportsBiasAdd),
    dg::internal::AddKernel("MatMul", "cpu", kF32Bf16, kPriority,
                            DG_KERNEL_STRIDED_INPUTS, "MatMulOneDNN",
                            &RunMatMul, &Supports),
    dg::internal::AddKernel("MatMulBiasAct", "cpu", kF32Bf16, kPriority,
                            DG_KERNEL_STRIDED_INPUTS, "MatMulBiasActOneDNN",
                            &RunMatMul, &Supports),
};

}  // namespace
}  // namespace mkldnn_plugin
