#include "common.h"


#include <omp.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mkldnn_plugin {

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

dnnl::memory::data_type DataType(DgDType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DG_FLOAT32: return dt::f32;
    case DG_BFLOAT16: return dt::bf16;
    case DG_FLOAT16: return dt::f16;
    case DG_INT8: return dt::s8;
    case DG_UINT8: return dt::u8;
    case DG_INT32: return dt::s32;
    default: break;
  }
  DG_CHECK(false, DG_UNIMPLEMENTED, "oneDNN has no data type for ",
           dg::DTypeName(dtype));
  return dt::undef;
}

dnnl::memory::dims Dims(const std::vector<int64_t>& v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

dnnl::memory::dims PlainDims(const dg::TensorRef& t) {
  if (t.ndim() == 5) return {t.dim(0), t.dim(1) * t.dim(4), t.dim(2), t.dim(3)};
  return Dims(t.shape());
}

dnnl::memory::desc Nchw16cDesc(const dnnl::memory::dims& plain,
                               dnnl::memory::data_type dt) {
  return dnnl::memory::desc(plain, dt, dnnl::memory::format_tag::nChw16c);
}

dnnl::memory::desc Desc(const dg::TensorRef& t) {
  std::vector<int64_t> shape = t.shape(), strides = t.strides();
  if (shape.empty()) {  // oneDNN has no 0-d memory: a 1-element vector
    shape = {1};
    strides = {1};
  }
  return dnnl::memory::desc(Dims(shape), DataType(t.dtype()), Dims(strides));
}

dnnl::memory::desc Plain(const dnnl::memory::dims& dims,
                         dnnl::memory::data_type dt) {
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  }
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::memory Memory(const dnnl::memory::desc& md, const dg::TensorRef& t) {
  return dnnl::memory(md, Engine(), const_cast<void*>(t.raw_data()));
}

PrimitiveCache& PrimitiveCache::Get() {
  static PrimitiveCache* cache = new PrimitiveCache();  // never destroyed:
  return *cache;  // primitives may outlive static destruction order
}

namespace {

void PrintCacheStats() {
  PrimitiveCache& c = PrimitiveCache::Get();
  std::fprintf(stderr,
               "dragon-mkldnn primitive cache: size=%zu hits=%zu misses=%zu\n",
               c.size(), c.hits(), c.misses());
}

}  // namespace

PrimitiveCache::PrimitiveCache() : capacity_(1024) {
  if (const char* env = std::getenv("DRAGON_MKLDNN_CACHE_CAPACITY")) {
    const long v = std::strtol(env, nullptr, 10);
    if (v > 0) capacity_ = static_cast<size_t>(v);
  }
  // A debugging aid (and what the tests read): the counts at exit.
  const char* stats = std::getenv("DRAGON_MKLDNN_CACHE_STATS");
  if (stats && std::strcmp(stats, "1") == 0) std::atexit(&PrintCacheStats);
}

PrimitiveCache::Entry PrimitiveCache::Lookup(
    std::string_view key, const std::function<Entry()>& make) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  Entry e = make();  // slow (JIT code generation): outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // another thread won
  lru_.emplace_front(std::string(key), e);
  index_.emplace(std::string_view(lru_.front().first), lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return e;
}

size_t PrimitiveCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}
size_t PrimitiveCache::hits() {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
size_t PrimitiveCache::misses() {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

void PrimitiveCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  index_.clear();
  lru_.clear();
}

namespace {

// Clears every non-NaN value whose sign bit is set, over n values of Bits.
// Branch-free integer arithmetic, so the loop vectorizes: it must cost
// little next to the convolution or product it follows.
template <typename Bits>
void ReluBitsRange(Bits* v, int64_t n) {
  constexpr int kShift = 8 * sizeof(Bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const Bits b = v[i];
    const Bits negative = static_cast<Bits>(b >> kShift);            // 0 or 1
    const Bits nan = static_cast<Bits>(IsNanBits(b) ? 1 : 0);
    const Bits clear = static_cast<Bits>(0u - (negative & (nan ^ 1u)));  // all ones
    v[i] = static_cast<Bits>(b & ~clear);
  }
}

template <typename Bits>
void ReluBits(Bits* v, int64_t n) {
  constexpr int64_t kChunk = int64_t{1} << 18;
  if (n < 4 * kChunk) {
    ReluBitsRange(v, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    ReluBitsRange(v + c * kChunk, std::min(kChunk, n - c * kChunk));
  }
}

}  // namespace

void ReluKeepNan(const dg::TensorRef& y) {
  DG_CHECK(y.is_contiguous(), DG_INTERNAL, "ReluKeepNan: output is strided");
  if (y.dtype() == DG_FLOAT32) {
    ReluBits(static_cast<uint32_t*>(y.raw_data()), y.numel());
  } else if (y.dtype() == DG_BFLOAT16) {
    ReluBits(static_cast<uint16_t*>(y.raw_data()), y.numel());
  } else {
    DG_CHECK(false, DG_INTERNAL, "ReluKeepNan: float32 or bfloat16 only");
  }
}

dnnl::primitive_attr Attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

// Whether primitives return only when done. With oneDNN's OpenMP (and TBB
// and sequential) CPU runtimes, execute() runs the work on the calling
// thread and its parallel region before returning, and stream::wait() has
// nothing to wait for; only the threadpool runtime queues work. Asked once.
bool ExecutionIsSynchronous() {
  static const bool sync = [] {
    const dnnl_version_t* v = dnnl_version();
    return v->cpu_runtime != DNNL_RUNTIME_THREADPOOL;
  }();
  return sync;
}

}  // namespace

void Execute(const dg::KernelContext& ctx, const dnnl::primitive& prim,
             const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args) {
  const dnnl::memory::desc sd = pd.scratchpad_desc();
  const size_t bytes = sd.get_size();
  if (bytes > 0) {
    args[DNNL_ARG_SCRATCHPAD] =
        dnnl::memory(sd, Engine(), ctx.workspace<uint8_t>(bytes));
  }
  prim.execute(Stream(), args);
  // The outputs (and the workspace, freed after the kernel returns) must be
  // final when the kernel returns.
  if (!ExecutionIsSynchronous()) Stream().wait();
}

BoundPrimitive::BoundPrimitive(
    dnnl::primitive prim, std::shared_ptr<const void> keep,
    const dnnl::primitive_desc_base& pd,
    const std::vector<std::pair<int, dnnl::memory::desc>>& args)
    : prim_(std::move(prim)), keep_(std::move(keep)) {
  std::vector<int> ids;
  for (const auto& [id, md] : args) {
    mems_.emplace_back(md, Engine(), static_cast<void*>(DNNL_MEMORY_NONE));
    ids.push_back(id);
  }
  const dnnl::memory::desc sd = pd.scratchpad_desc();
  scratchpad_bytes_ = sd.get_size();
  if (scratchpad_bytes_ > 0) {
    mems_.emplace_back(sd, Engine(), static_cast<void*>(DNNL_MEMORY_NONE));
    ids.push_back(DNNL_ARG_SCRATCHPAD);
  }
  for (size_t i = 0; i < mems_.size(); ++i) {
    exec_args_.push_back({ids[i], mems_[i].get()});
  }
}

void BoundPrimitive::Run(const dg::KernelContext& ctx,
                         const void* const* data) {
  const size_t n = mems_.size() - (scratchpad_bytes_ > 0 ? 1 : 0);
  for (size_t i = 0; i < n; ++i) {
    mems_[i].set_data_handle(const_cast<void*>(data[i]));
  }
  if (scratchpad_bytes_ > 0) {
    mems_.back().set_data_handle(ctx.workspace<uint8_t>(scratchpad_bytes_));
  }
  const dnnl_status_t s =
      dnnl_primitive_execute(prim_.get(), Stream().get(),
                             static_cast<int>(exec_args_.size()),
                             exec_args_.data());
  DG_CHECK(s == dnnl_success, DG_INTERNAL, "oneDNN primitive failed (status ",
           static_cast<int>(s), ")");
  if (!ExecutionIsSynchronous()) Stream().wait();
}

std::string DescKey(const dnnl::memory::desc& md) {
  KeyBuilder k;
  k << static_cast<int>(md.get_data_type())
    << static_cast<int>(md.get_format_kind()) << md.get_dims();
  if (md.get_format_kind() == dnnl::memory::format_kind::blocked) {
    k << md.get_strides() << md.get_inner_blks() << md.get_inner_idxs();
  }
  return k.str();
}

dnnl::memory Scratch(const dg::KernelContext& ctx,
                     const dnnl::memory::desc& md) {
  return dnnl::memory(md, Engine(), ctx.workspace<uint8_t>(md.get_size()));
}

void CopyInto(const dg::KernelContext& ctx, const dnnl::memory& src,
              const dnnl::memory& dst) {
  if (CopyWeights(ctx, src, dst)) return;
  const dnnl::memory::desc from = src.get_desc(), to = dst.get_desc();
  auto p = Cached<dnnl::reorder>(Key("reorder", DescKey(from), DescKey(to)),
                                 [&] {
    return dnnl::reorder::primitive_desc(Engine(), from, Engine(), to, Attr());
  });
  Execute(ctx, p.prim, *p.pd, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

dnnl::memory Reorder(const dg::KernelContext& ctx, const dnnl::memory& src,
                     const dnnl::memory::desc& want) {
  if (src.get_desc() == want) return src;
  dnnl::memory dst = Scratch(ctx, want);
  CopyInto(ctx, src, dst);
  return dst;
}

void CopyOut(const dg::KernelContext& ctx, const dnnl::memory& buf,
             const dnnl::memory& dst) {
  if (buf.get_data_handle() == dst.get_data_handle()) return;
  CopyInto(ctx, buf, dst);
}

int Threads(const DgCallFrame* f, int64_t work, int64_t serial_work) {
  if (work < serial_work) return 1;
  const DgHostApi* host = f->host;
  const int n = (host && DG_HOST_HAS(host, num_threads) && host->num_threads)
                    ? host->num_threads()
                    : omp_get_max_threads();
  return std::max(n, 1);
}

OmpThreads::OmpThreads(int n) : saved_(omp_get_max_threads()) {
  if (n != saved_) omp_set_num_threads(n);
}

OmpThreads::~OmpThreads() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

bool AllDTypes(const DgCallFrame* f, DgDTypeMask mask) {
  for (int32_t i = 0; i < f->num_inputs; ++i) {
    if (f->inputs[i] && !(mask & dg::Bit(f->inputs[i]->dtype))) return false;
  }
  return true;
}

bool NonNegativeStrides(const DgCallFrame* f) {
  for (int32_t i = 0; i < f->num_inputs; ++i) {
    const DgTensorView* t = f->inputs[i];
    if (!t) continue;
    for (int32_t d = 0; d < t->ndim; ++d) {
      if (t->strides[d] < 0) return false;
    }
  }
  return true;
}

}  // namespace mkldnn_plugin
