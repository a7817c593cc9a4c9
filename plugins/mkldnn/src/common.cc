#include "common.h"

#include <cstdlib>

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

PrimitiveCache::PrimitiveCache() : capacity_(1024) {
  if (const char* env = std::getenv("DRAGON_MKLDNN_CACHE_CAPACITY")) {
    const long v = std::strtol(env, nullptr, 10);
    if (v > 0) capacity_ = static_cast<size_t>(v);
  }
}

PrimitiveCache::Entry PrimitiveCache::Lookup(
    const std::string& key, const std::function<Entry()>& make) {
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
  lru_.emplace_front(key, e);
  index_[key] = lru_.begin();
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

dnnl::primitive_attr Attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

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
  Stream().wait();
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

dnnl::memory Reorder(const dg::KernelContext& ctx, const dnnl::memory& src,
                     const dnnl::memory::desc& want) {
  const dnnl::memory::desc have = src.get_desc();
  if (have == want) return src;
  dnnl::memory dst(want, Engine(), ctx.workspace<uint8_t>(want.get_size()));
  auto p = Cached<dnnl::reorder>(Key("reorder", DescKey(have), DescKey(want)),
                                 [&] {
    return dnnl::reorder::primitive_desc(Engine(), have, Engine(), want,
                                         Attr());
  });
  Execute(ctx, p.prim, *p.pd, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
  return dst;
}

bool AllDTypes(const DgCallFrame* f, DgDTypeMask mask) {
  for (int32_t i = 0; i < f->num_inputs; ++i) {
    if (f->inputs[i] && !(mask & dg::Bit(f->inputs[i]->dtype))) return false;
  }
  return true;
}

}  // namespace mkldnn_plugin
