// Shared by every kernel of the mkldnn plugin: the oneDNN engine and
// stream, tensor views as oneDNN memory, the primitive cache, and the
// scratchpad taken from the core's workspace.
//
// Conventions for a kernel file (matmul.cc, conv.cc, ...):
//   * register with DG_KERNEL_EX(op, "cpu", kPriority, traits, fn, types...)
//     so it wins over cpu_eigen (priority 0);
//   * build a primitive descriptor once per shape/attribute key through
//     Cached<...>(key, make) and run it with Execute(ctx, prim, args), which
//     supplies the user-mode scratchpad from ctx.workspace();
//   * a shape or attribute oneDNN cannot serve is declined by a supports()
//     predicate (the core then picks the next kernel by its deterministic
//     order and explain() says so), never by a silent fallback inside.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dnnl.hpp"
#include "dragon/plugin.hpp"

namespace mkldnn_plugin {

// The priority of every kernel here (cpu_eigen's reference kernels use 0).
constexpr int32_t kPriority = 10;

constexpr DgDTypeMask kF32 = dg::Bit(DG_FLOAT32);
constexpr DgDTypeMask kF32Bf16 = dg::Bit(DG_FLOAT32) | dg::Bit(DG_BFLOAT16);

// The CPU engine (one per process).
dnnl::engine& Engine();

// A stream on Engine() for the calling thread (oneDNN CPU streams are cheap
// and not meant to be shared between threads).
dnnl::stream& Stream();

// oneDNN's data type for a Dragon dtype (float32, bfloat16, float16, int8,
// uint8, int32); throws DG_UNIMPLEMENTED for others.
dnnl::memory::data_type DataType(DgDType dtype);

// A memory descriptor with the tensor's shape and its strides (in elements),
// so strided inputs are read in place.
dnnl::memory::desc Desc(const dg::TensorRef& t);

// A dense row-major descriptor of the given dims.
dnnl::memory::desc Plain(const dnnl::memory::dims& dims,
                         dnnl::memory::data_type dt);

// A oneDNN memory object over the tensor's data (no copy).
dnnl::memory Memory(const dnnl::memory::desc& md, const dg::TensorRef& t);

dnnl::memory::dims Dims(const std::vector<int64_t>& v);

// Builds cache keys: Key("conv", x.shape(), w.shape(), strides, ...).
class KeyBuilder {
 public:
  template <typename T>
  KeyBuilder& operator<<(const T& v) {
    os_ << v << '|';
    return *this;
  }
  KeyBuilder& operator<<(const std::vector<int64_t>& v) {
    for (int64_t d : v) os_ << d << ',';
    os_ << '|';
    return *this;
  }
  KeyBuilder& operator<<(const std::vector<int>& v) {
    for (int64_t d : v) os_ << d << ',';
    os_ << '|';
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

template <typename... Ts>
std::string Key(const Ts&... parts) {
  KeyBuilder k;
  (k << ... << parts);
  return k.str();
}

// A least-recently-used cache of primitives and their descriptors, keyed by
// string (shapes, strides, dtypes and attributes). Thread-safe; the entries
// are immutable once built, and a oneDNN primitive may run on several
// threads at once when its scratchpad is user-provided (Execute does that).
// Capacity: DRAGON_MKLDNN_CACHE_CAPACITY entries (default 1024).
class PrimitiveCache {
 public:
  struct Entry {
    dnnl::primitive prim;
    std::shared_ptr<const void> pd;  // the typed primitive descriptor
  };
  static PrimitiveCache& Get();

  // The entry for key, made by make() on a miss (outside the lock).
  Entry Lookup(const std::string& key, const std::function<Entry()>& make);
  size_t size();
  size_t hits();
  size_t misses();
  void Clear();

 private:
  PrimitiveCache();
  std::mutex mu_;
  size_t capacity_;
  size_t hits_ = 0, misses_ = 0;
  std::list<std::pair<std::string, Entry>> lru_;  // front: most recent
  std::unordered_map<std::string,
                     std::list<std::pair<std::string, Entry>>::iterator>
      index_;
};

// A cached primitive with its typed descriptor (kept alive while in use
// even if the cache evicts it meanwhile).
template <typename PD>
struct Prim {
  dnnl::primitive prim;
  std::shared_ptr<const PD> pd;
};

// The cached primitive for key: make() returns its primitive descriptor PD
// (e.g. dnnl::matmul::primitive_desc) and P (dnnl::matmul) is created from
// it once. Usage:
//   auto p = Cached<dnnl::matmul>(key, [&] {
//     return dnnl::matmul::primitive_desc(Engine(), a_md, b_md, y_md, Attr());
//   });
template <typename P, typename Make>
auto Cached(const std::string& key, Make&& make) {
  using PD = decltype(make());
  PrimitiveCache::Entry e = PrimitiveCache::Get().Lookup(key, [&] {
    auto pd = std::make_shared<const PD>(make());
    return PrimitiveCache::Entry{P(*pd), pd};
  });
  return Prim<PD>{e.prim, std::static_pointer_cast<const PD>(e.pd)};
}

// Primitive attributes with the user-mode scratchpad every kernel uses.
dnnl::primitive_attr Attr();

// Runs prim with args on Stream(), adding DNNL_ARG_SCRATCHPAD from the
// core's workspace, and waits for it.
void Execute(const dg::KernelContext& ctx, const dnnl::primitive& prim,
             const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

// A cache-key fragment describing a memory descriptor (dims, dtype, layout).
std::string DescKey(const dnnl::memory::desc& md);

// Copies src into a buffer of layout `want` taken from ctx.workspace() when
// the layouts differ; returns src itself otherwise. For inputs whose
// primitive asked for a blocked layout.
dnnl::memory Reorder(const dg::KernelContext& ctx, const dnnl::memory& src,
                     const dnnl::memory::desc& want);

// Whether every tensor of the call has a dtype the kernel handles.
bool AllDTypes(const DgCallFrame* f, DgDTypeMask mask);

}  // namespace mkldnn_plugin
