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

#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
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

// Blocked tensors of the *Nchw16c ops (layout.cc): a dense
// [N, C/16, H, W, 16] tensor is oneDNN's nChw16c view of [N, C, H, W].
// PlainDims gives [N, C, H, W] for one (and the shape of any other tensor);
// Nchw16cDesc the nChw16c descriptor of those plain dims.
dnnl::memory::dims PlainDims(const dg::TensorRef& t);
dnnl::memory::desc Nchw16cDesc(const dnnl::memory::dims& plain,
                               dnnl::memory::data_type dt);

// Builds cache keys: Key("conv", x.shape(), w.shape(), strides, ...).
// Text fields are separated by '|'; numbers are formatted with
// std::to_chars into one string (no stream, one allocation at most).
class KeyBuilder {
 public:
  KeyBuilder& operator<<(std::string_view v) {
    return Text(v.data(), v.size());
  }
  KeyBuilder& operator<<(const std::string& v) {
    return Text(v.data(), v.size());
  }
  KeyBuilder& operator<<(const char* v) { return Text(v, std::strlen(v)); }
  KeyBuilder& operator<<(char v) { return Text(&v, 1); }
  KeyBuilder& operator<<(bool v) { return Number(v ? 1 : 0); }
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> ||
                                                    std::is_enum_v<T>>>
  KeyBuilder& operator<<(T v) {
    if constexpr (std::is_enum_v<T>) {
      return Number(static_cast<int64_t>(v));
    } else {
      return Number(v);
    }
  }
  template <typename T>
  KeyBuilder& operator<<(const std::vector<T>& v) {
    for (const T& d : v) Append(d), s_ += ',';
    s_ += '|';
    return *this;
  }
  // Anything else with an operator<< (the slow path, through a stream).
  template <typename T, typename = std::enable_if_t<
                            !std::is_arithmetic_v<T> && !std::is_enum_v<T>>,
            typename = decltype(std::declval<std::ostream&>()
                                << std::declval<const T&>())>
  KeyBuilder& operator<<(const T& v) {
    std::ostringstream os;
    os << v;
    const std::string text = os.str();
    return Text(text.data(), text.size());
  }
  std::string str() const { return s_; }

 private:
  KeyBuilder& Text(const char* p, size_t n) {
    s_.append(p, n);
    s_ += '|';
    return *this;
  }
  template <typename T>
  KeyBuilder& Number(T v) {
    Append(v);
    s_ += '|';
    return *this;
  }
  template <typename T>
  void Append(T v) {
    char buf[32];
    if constexpr (std::is_floating_point_v<T>) {
      // Exact: the shortest text that reads back as the same value.
      auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<double>(v));
      s_.append(buf, r.ptr);
    } else {
      auto r = std::to_chars(buf, buf + sizeof(buf), v);
      s_.append(buf, r.ptr);
    }
  }
  std::string s_;
};

template <typename... Ts>
std::string Key(const Ts&... parts) {
  KeyBuilder k;
  (k << ... << parts);
  return k.str();
}

// A binary cache key for hot paths: a tag, then raw 64-bit words (no
// formatting), built in an inline buffer (no allocation up to kInline
// bytes). Its bytes never collide with a text Key(): they start with a NUL
// byte, which text keys do not contain.
class FastKey {
 public:
  explicit FastKey(const char* tag) {
    Put("", 1);
    Put(tag, std::strlen(tag) + 1);
  }
  FastKey& operator<<(int64_t v) { return Add(&v, 1); }
  FastKey& Add(const int64_t* v, int n) {
    Put(v, sizeof(int64_t) * static_cast<size_t>(n));
    return *this;
  }
  std::string_view view() const {
    return heap_.empty() ? std::string_view(buf_, n_) : std::string_view(heap_);
  }
  std::string str() const { return std::string(view()); }

 private:
  static constexpr size_t kInline = 1024;
  void Put(const void* p, size_t n) {
    if (heap_.empty() && n_ + n <= kInline) {
      std::memcpy(buf_ + n_, p, n);
      n_ += n;
      return;
    }
    if (heap_.empty()) heap_.assign(buf_, n_);
    heap_.append(static_cast<const char*>(p), n);
  }
  char buf_[kInline];
  size_t n_ = 0;
  std::string heap_;  // used once the key outgrows buf_
};

// A least-recently-used cache of primitives and their descriptors, keyed by
// string (shapes, strides, dtypes and attributes). Thread-safe; the entries
// are immutable once built, and a oneDNN primitive may run on several
// threads at once when its scratchpad is user-provided (Execute does that).
// Capacity: DRAGON_MKLDNN_CACHE_CAPACITY entries (default 1024). With
// DRAGON_MKLDNN_CACHE_STATS=1 the size, hits and misses are printed to
// stderr at exit (a debugging aid; the tests read it).
class PrimitiveCache {
 public:
  struct Entry {
    dnnl::primitive prim;
    std::shared_ptr<const void> pd;  // the typed primitive descriptor
  };
  static PrimitiveCache& Get();

  // The entry for key, made by make() on a miss (outside the lock).
  Entry Lookup(std::string_view key, const std::function<Entry()>& make);
  size_t size();
  size_t hits();
  size_t misses();
  void Clear();

 private:
  PrimitiveCache();
  std::mutex mu_;
  size_t capacity_;
  size_t hits_ = 0, misses_ = 0;
  // front: most recent. The index's keys view the list's strings (list
  // nodes never move), so a lookup by string_view allocates nothing.
  std::list<std::pair<std::string, Entry>> lru_;
  std::unordered_map<std::string_view,
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
auto Cached(std::string_view key, Make&& make) {
  using PD = decltype(make());
  PrimitiveCache::Entry e = PrimitiveCache::Get().Lookup(key, [&] {
    auto pd = std::make_shared<const PD>(make());
    return PrimitiveCache::Entry{P(*pd), pd};
  });
  return Prim<PD>{e.prim, std::static_pointer_cast<const PD>(e.pd)};
}

// A primitive bound, on one thread, to memory objects made once: a call
// only swaps their data pointers and runs through the C API, with no
// allocation (the per-call cost of small products). Not thread-safe: keep
// one per thread (e.g. in a thread_local memo keyed like the cache).
class BoundPrimitive {
 public:
  BoundPrimitive() = default;
  // `keep` holds whatever owns prim's descriptor; args are (DNNL_ARG_*,
  // descriptor) pairs in the order Run() receives their data pointers.
  BoundPrimitive(dnnl::primitive prim, std::shared_ptr<const void> keep,
                 const dnnl::primitive_desc_base& pd,
                 const std::vector<std::pair<int, dnnl::memory::desc>>& args);
  // Runs with data[i] for args[i], the scratchpad from ctx.workspace().
  void Run(const dg::KernelContext& ctx, const void* const* data);
  bool valid() const { return static_cast<bool>(prim_); }

 private:
  dnnl::primitive prim_;
  std::shared_ptr<const void> keep_;
  std::vector<dnnl::memory> mems_;  // args, then the scratchpad (if any)
  std::vector<dnnl_exec_arg_t> exec_args_;
  size_t scratchpad_bytes_ = 0;
};

// The fused ops' activation "relu" with the core Relu's semantics, in place
// over a contiguous float32 or bfloat16 output: negative values (and -0)
// become +0, NaN stays NaN. oneDNN's relu (and clip) post-ops map NaN to 0,
// so the fused kernels run their primitive without one and call this.
void ReluKeepNan(const dg::TensorRef& y);

// Primitive attributes with the user-mode scratchpad every kernel uses.
dnnl::primitive_attr Attr();

// Runs prim with args on Stream(), adding DNNL_ARG_SCRATCHPAD from the
// core's workspace; returns when the work is done (it calls stream.wait()
// only for oneDNN's asynchronous threadpool runtime: with OpenMP, execute()
// itself returns when done). For a hot path see BoundPrimitive.
void Execute(const dg::KernelContext& ctx, const dnnl::primitive& prim,
             const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

// A cache-key fragment describing a memory descriptor (dims, dtype, layout).
std::string DescKey(const dnnl::memory::desc& md);

// A oneDNN memory of descriptor md over a buffer from ctx.workspace()
// (valid until the kernel returns).
dnnl::memory Scratch(const dg::KernelContext& ctx,
                     const dnnl::memory::desc& md);

// Copies src into dst (same dims, any layouts) with a cached oneDNN reorder,
// or CopyWeights() where it serves the pair.
void CopyInto(const dg::KernelContext& ctx, const dnnl::memory& src,
              const dnnl::memory& dst);

// Convolution weights between dense [O, I, kh, kw] float32 and oneDNN's
// OIhw16i16o (and into the deconvolution's OIhw16o16i) with AVX-512
// transposes (weights.cc); false, having done
// nothing, for any other pair of layouts, another CPU, or with
// DRAGON_MKLDNN_WEIGHT_REORDER=onednn.
bool CopyWeights(const dg::KernelContext& ctx, const dnnl::memory& src,
                 const dnnl::memory& dst);

// Copies src into a buffer of layout `want` taken from ctx.workspace() when
// the layouts differ; returns src itself otherwise. For inputs whose
// primitive asked for a blocked layout.
dnnl::memory Reorder(const dg::KernelContext& ctx, const dnnl::memory& src,
                     const dnnl::memory::desc& want);

// Copies the primitive's output `buf` into `dst` unless it is dst's memory
// already (buf came from Scratch() when the primitive wanted another layout).
void CopyOut(const dg::KernelContext& ctx, const dnnl::memory& buf,
             const dnnl::memory& dst);

// The bits of a float (cache keys hold a float attribute exactly this way).
inline uint32_t FloatBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// Whether the bits of a float32 (uint32_t) or bfloat16 (uint16_t) value are
// a NaN: an all-ones exponent with a non-zero mantissa, i.e. the bits
// without the sign exceed those of infinity. An integer test, which the
// compiler vectorizes.
constexpr bool IsNanBits(uint32_t b) {
  return (b & 0x7fffffffu) > 0x7f800000u;
}
constexpr bool IsNanBits(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

// The sign bit and a quiet NaN of float32 (uint32_t) and bfloat16
// (uint16_t) values.
template <typename Bits>
constexpr Bits kSignBit = static_cast<Bits>(Bits{1} << (8 * sizeof(Bits) - 1));
template <typename Bits>
constexpr Bits kQuietNanBits =
    static_cast<Bits>(sizeof(Bits) == 4 ? 0x7fc00000u : 0x7fc0u);

// The number of threads a call should use: the core's wish
// (host->num_threads, i.e. DRAGON_NUM_THREADS or the hardware count), or 1
// for a call with less than `serial_work` units of work, where OpenMP's
// fork and join would cost more than the work itself.
int Threads(const DgCallFrame* f, int64_t work, int64_t serial_work);

// Sets the calling thread's OpenMP thread count (what oneDNN reads when it
// creates a primitive and sizes its parallel loops) for a scope. oneDNN
// fixes a primitive's thread count at creation, so the count belongs in the
// primitive's cache key and the guard must cover the Cached() call.
class OmpThreads {
 public:
  explicit OmpThreads(int n);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

// Whether every tensor of the call has a dtype the kernel handles.
bool AllDTypes(const DgCallFrame* f, DgDTypeMask mask);

// Whether no input of the call has a negative stride (a flipped view):
// oneDNN memory descriptors cannot describe one, so a kernel that reads
// strided inputs in place declines such calls (the core then packs them
// for the next kernel).
bool NonNegativeStrides(const DgCallFrame* f);

}  // namespace mkldnn_plugin
