// The op schema registry, the kernel table and the plugin records.
// Kernel selection is a deterministic total order:
//   user pin > priority > dtype specificity (fewer dtypes wins)
//   > plugin name > kernel name.
#ifndef DRAGON_CORE_REGISTRY_H_
#define DRAGON_CORE_REGISTRY_H_

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace dragon {

// An attribute value that owns its storage; `v` points into it.
class AttrValue {
 public:
  AttrValue() { Fix(); }
  explicit AttrValue(DgAttrType type) { v.type = type; Fix(); }
  AttrValue(const AttrValue& o) { *this = o; }
  AttrValue& operator=(const AttrValue& o) {
    v = o.v;
    s = o.s;
    ints = o.ints;
    floats = o.floats;
    Fix();
    return *this;
  }
  static AttrValue Copy(const DgAttrValue& src);
  void Fix() {
    v.struct_size = sizeof(DgAttrValue);
    v.s = s.c_str();
    v.ints = ints.data();
    v.floats = floats.data();
    v.count = v.type == DG_ATTR_INTS ? static_cast<int64_t>(ints.size())
                                     : static_cast<int64_t>(floats.size());
  }
  std::string ToString() const;

  DgAttrValue v{};
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

struct ArgSchema {
  std::string name;
  DgDTypeMask dtypes = 0;
  uint32_t flags = 0;
  std::string doc;
};

struct AttrSchema {
  std::string name;
  DgAttrType type = DG_ATTR_INT;
  uint32_t flags = 0;
  bool has_default = false;
  AttrValue def;
  std::string doc;
};

struct KernelEntry {
  std::string op, device, name, plugin, dist;
  DgDTypeMask dtypes = 0;
  int32_t priority = 0;
  uint32_t traits = 0;
  DgKernelFn fn = nullptr;
  DgSupportsFn supports = nullptr;
  void* user_data = nullptr;
  uint32_t abi_minor = 0;  // of the plugin's build: call-site state needs >= 2
};

// Op flag bit reserved by the core (not in the public ABI): a view op
// (Reshape, Squeeze, Unsqueeze, Flatten): one output holding input 0's
// elements in the same row-major order and dtype. The dispatcher makes
// output 0 an alias of input 0's storage (of one dense Contiguous copy of
// it when input 0 is not contiguous) and runs no kernel. Only core ops may
// set it (the registry clears it on a plugin's op); making it public needs
// an ABI minor bump.
constexpr uint32_t kOpFlagView = 1u << 5;
// Core-reserved too: a permuting view (Transpose): output 0 is input 0 with
// its axes permuted by the int-list attribute "perm" (unset: reversed). The
// dispatcher always aliases (any input strides: the output's strides are the
// input's, permuted) and runs no kernel, so output 0 is in general not
// contiguous; kernels without DG_KERNEL_STRIDED_INPUTS get a dense copy.
constexpr uint32_t kOpFlagPermuteView = 1u << 6;
// Core-reserved too: an element-wise op (unary, broadcasting binary, Where,
// Cast): output element i depends only on the inputs' elements at the same
// (broadcast) position, and no attribute names an axis. The eager
// dispatcher keeps a shared memory format for it (docs/devices.md, "Memory
// format"): inputs that are all channels-last give a channels-last output.
constexpr uint32_t kOpFlagElementwise = 1u << 7;

struct OpSchema {
  std::string name, py_name, doc, plugin;
  std::vector<ArgSchema> inputs, outputs;
  std::vector<AttrSchema> attrs;
  std::vector<const char*> attr_names;  // into attrs[i].name
  uint32_t flags = 0;
  int32_t dispatch_input = 0;
  uint32_t inplace_inputs = 0;
  DgInferFn infer = nullptr;
  void* user_data = nullptr;
  int32_t seed_attr = -1;  // index of an int attr "seed" of a stateful op

  bool variadic_input() const {
    return !inputs.empty() && (inputs.back().flags & DG_ARG_VARIADIC);
  }
  bool variadic_output() const {
    return !outputs.empty() && (outputs.back().flags & DG_ARG_VARIADIC);
  }
  int32_t AttrIndex(const std::string& n) const;
  // Deep copy from the ABI form; throws CoreError on a malformed definition.
  static std::unique_ptr<OpSchema> FromDef(const DgOpDef& def,
                                           const std::string& plugin);

  // Selection cache (per device type × dtype), invalidated by generation.
  struct CacheSlot {
    uint64_t generation = ~uint64_t{0};
    std::shared_ptr<const std::vector<const KernelEntry*>> candidates;
    std::string error;  // a selection error (conflict, unmatched pin)
  };
  std::mutex cache_mu;
  std::vector<std::array<CacheSlot, DG_NUM_DTYPES>> cache;
};

struct PluginRecord {
  std::string name, version, path, dist, dist_version, entry_point;
  uint32_t abi_major = 0, abi_minor = 0, min_host_minor = 0;
  std::string state;  // "loaded" or "broken"
  std::string error;
  int32_t num_ops = 0, num_kernels = 0;
  std::vector<std::string> devices;
  // What a broken plugin would have provided (known when init ran).
  std::vector<std::string> broken_ops;
  std::vector<std::pair<std::string, std::string>> broken_kernels;
};

class Registry {
 public:
  static Registry& Get();

  OpSchema* FindOp(const std::string& name);
  OpSchema* FindOpByPyName(const std::string& py_name);
  std::vector<OpSchema*> Ops();
  std::vector<const KernelEntry*> Kernels(const std::string& op);

  // Adds definitions; all-or-nothing per call is the loader's job.
  void AddOp(std::unique_ptr<OpSchema> op);
  void AddKernel(KernelEntry k);
  // Retires an op and all its kernels (ops defined from Python, which a
  // prototyping session redefines). Nothing is freed: op handles and
  // compiled plans may still point at them. False when `name` is unknown.
  bool RetireOp(const std::string& name);

  // The ordered candidates for (op, device type, dtype); cached.
  // Throws CoreError when the claims conflict or a pin matches nothing.
  std::shared_ptr<const std::vector<const KernelEntry*>> Candidates(
      OpSchema& op, int32_t device_type, DgDType dtype);
  // A human explanation of the selection order.
  std::string Explain(const std::string& op, const std::string& device,
                      DgDType dtype);

  // Pins: kernel name or plugin name for (op, device name).
  void Pin(const std::string& op, const std::string& device,
           const std::string& target);
  void Unpin(const std::string& op, const std::string& device);
  std::map<std::pair<std::string, std::string>, std::string> Pins();

  PluginRecord& AddPlugin(PluginRecord rec);
  std::vector<PluginRecord> Plugins();
  const PluginRecord* FindPlugin(const std::string& name);
  // The broken plugin that would have provided `op` (on `device` when
  // non-empty), or nullptr.
  const PluginRecord* BrokenProvider(const std::string& op,
                                     const std::string& device);

  uint64_t generation() const { return generation_.load(); }
  std::mutex& mutex() { return mu_; }

 private:
  Registry() = default;
  std::vector<const KernelEntry*> Order(const std::string& op,
                                        const std::string& device,
                                        DgDType dtype, std::string* pin_note);

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<OpSchema>> ops_;
  std::unordered_map<std::string, OpSchema*> by_py_name_;
  std::map<std::string, std::vector<std::unique_ptr<KernelEntry>>> kernels_;
  std::map<std::pair<std::string, std::string>, std::string> pins_;
  std::deque<PluginRecord> plugins_;  // stable addresses
  std::vector<std::unique_ptr<OpSchema>> retired_ops_;
  std::vector<std::unique_ptr<KernelEntry>> retired_kernels_;
  std::atomic<uint64_t> generation_{1};
};

}  // namespace dragon

#endif  // DRAGON_CORE_REGISTRY_H_
