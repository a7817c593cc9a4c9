#include "registry.h"

#include <algorithm>
#include <sstream>

#include "device.h"

namespace dragon {

// ------------------------------------------------------------ AttrValue

AttrValue AttrValue::Copy(const DgAttrValue& src) {
  AttrValue a;
  a.v.type = src.type;
  a.v.present = src.present;
  a.v.i = src.i;
  a.v.f = src.f;
  if (src.type == DG_ATTR_STRING && src.s) a.s = src.s;
  if (src.type == DG_ATTR_INTS && src.ints)
    a.ints.assign(src.ints, src.ints + src.count);
  if (src.type == DG_ATTR_FLOATS && src.floats)
    a.floats.assign(src.floats, src.floats + src.count);
  a.Fix();
  return a;
}

std::string AttrValue::ToString() const {
  if (!v.present) return "None";
  std::ostringstream os;
  switch (v.type) {
    case DG_ATTR_INT: os << v.i; break;
    case DG_ATTR_FLOAT: os << v.f; break;
    case DG_ATTR_BOOL: os << (v.i ? "True" : "False"); break;
    case DG_ATTR_STRING: os << "'" << s << "'"; break;
    case DG_ATTR_DTYPE: os << DTypeName(static_cast<DgDType>(v.i)); break;
    case DG_ATTR_INTS:
      os << "[";
      for (size_t i = 0; i < ints.size(); ++i) os << (i ? ", " : "") << ints[i];
      os << "]";
      break;
    case DG_ATTR_FLOATS:
      os << "[";
      for (size_t i = 0; i < floats.size(); ++i) os << (i ? ", " : "") << floats[i];
      os << "]";
      break;
  }
  return os.str();
}

// ------------------------------------------------------------ OpSchema

int32_t OpSchema::AttrIndex(const std::string& n) const {
  for (size_t i = 0; i < attrs.size(); ++i)
    if (attrs[i].name == n) return static_cast<int32_t>(i);
  return -1;
}

namespace {
std::string SafeStr(const char* s) { return s ? std::string(s) : std::string(); }

std::vector<ArgSchema> CopyArgs(const DgArgDef* args, int32_t n,
                                const std::string& op, const char* what) {
  std::vector<ArgSchema> out;
  for (int32_t i = 0; i < n; ++i) {
    ArgSchema a;
    a.name = SafeStr(args[i].name);
    a.dtypes = args[i].dtypes;
    a.flags = args[i].flags;
    a.doc = SafeStr(args[i].doc);
    if (a.name.empty())
      throw CoreError(DG_INVALID_ARGUMENT, dg::Str(op, ": ", what, " ", i, " has no name"));
    if ((a.flags & DG_ARG_VARIADIC) && i != n - 1)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str(op, ": only the last ", what, " may be variadic"));
    out.push_back(std::move(a));
  }
  return out;
}
}  // namespace

std::unique_ptr<OpSchema> OpSchema::FromDef(const DgOpDef& def,
                                            const std::string& plugin) {
  auto op = std::make_unique<OpSchema>();
  op->name = SafeStr(def.name);
  if (op->name.empty())
    throw CoreError(DG_INVALID_ARGUMENT, "op definition without a name");
  op->py_name = SafeStr(def.py_name);
  if (op->py_name.empty()) op->py_name = dg::OpSchema::SnakeCase(op->name);
  op->doc = SafeStr(def.doc);
  op->plugin = plugin;
  op->inputs = CopyArgs(def.inputs, def.num_inputs, op->name, "input");
  op->outputs = CopyArgs(def.outputs, def.num_outputs, op->name, "output");
  if (op->outputs.empty())
    throw CoreError(DG_INVALID_ARGUMENT, dg::Str(op->name, ": an op needs an output"));
  bool seen_default = false;
  for (int32_t i = 0; i < def.num_attrs; ++i) {
    const DgAttrDef& d = def.attrs[i];
    AttrSchema a;
    a.name = SafeStr(d.name);
    a.type = d.type;
    a.flags = d.flags;
    a.doc = SafeStr(d.doc);
    if (a.type < DG_ATTR_INT || a.type > DG_ATTR_DTYPE)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str(op->name, ": attribute '", a.name, "' has unknown type ", a.type));
    if (d.default_value && !(d.flags & (DG_ATTR_REQUIRED | DG_ATTR_OPTIONAL))) {
      a.has_default = true;
      a.def = AttrValue::Copy(*d.default_value);
      a.def.v.type = a.type;
      a.def.v.present = 1;
      a.def.Fix();
    } else {
      a.def = AttrValue(a.type);
      a.def.v.present = 0;
    }
    bool required = (d.flags & DG_ATTR_REQUIRED) || (!a.has_default && !(d.flags & DG_ATTR_OPTIONAL));
    if (required && seen_default)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str(op->name, ": required attribute '", a.name,
                              "' follows an attribute with a default"));
    if (!required) seen_default = true;
    op->attrs.push_back(std::move(a));
  }
  for (auto& a : op->attrs) op->attr_names.push_back(a.name.c_str());
  op->flags = def.flags;
  if (plugin != "core") op->flags &= ~(kOpFlagView | kOpFlagPermuteView | kOpFlagElementwise);  // core-reserved
  // A collective (ABI 1.3) is never merged by CSE nor folded: the passes
  // treat it as stateful; prune keeps it even when its result is unused.
  if (op->flags & DG_OP_COLLECTIVE) op->flags |= DG_OP_STATEFUL;
  op->dispatch_input = def.dispatch_input;
  if (!op->inputs.empty() &&
      (op->dispatch_input < 0 ||
       op->dispatch_input >= static_cast<int32_t>(op->inputs.size())))
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str(op->name, ": dispatch_input ", op->dispatch_input, " out of range"));
  op->inplace_inputs = def.inplace_inputs;
  op->infer = def.infer;
  op->user_data = def.user_data;
  if (!op->infer)
    throw CoreError(DG_INVALID_ARGUMENT, dg::Str(op->name, ": no shape function"));
  if (op->flags & DG_OP_STATEFUL) {
    int32_t i = op->AttrIndex("seed");
    if (i >= 0 && op->attrs[i].type == DG_ATTR_INT) op->seed_attr = i;
  }
  return op;
}

// ------------------------------------------------------------ Registry

Registry& Registry::Get() {
  static Registry* r = new Registry();  // never destroyed (plugins outlive)
  return *r;
}

OpSchema* Registry::FindOp(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

OpSchema* Registry::FindOpByPyName(const std::string& py_name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_py_name_.find(py_name);
  return it == by_py_name_.end() ? nullptr : it->second;
}

std::vector<OpSchema*> Registry::Ops() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpSchema*> out;
  for (auto& kv : ops_) out.push_back(kv.second.get());
  return out;
}

std::vector<const KernelEntry*> Registry::Kernels(const std::string& op) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const KernelEntry*> out;
  auto it = kernels_.find(op);
  if (it != kernels_.end())
    for (auto& k : it->second) out.push_back(k.get());
  return out;
}

void Registry::AddOp(std::unique_ptr<OpSchema> op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(op->name);
  if (it != ops_.end())
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("op '", op->name, "' is already defined by '",
                            it->second->plugin, "'"));
  auto py = by_py_name_.find(op->py_name);
  if (py != by_py_name_.end())
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("Python name '", op->py_name, "' of op '", op->name,
                            "' is already used by op '", py->second->name, "'"));
  by_py_name_[op->py_name] = op.get();
  ops_[op->name] = std::move(op);
  ++generation_;
}

void Registry::AddKernel(KernelEntry k) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = kernels_[k.op];
  list.push_back(std::make_unique<KernelEntry>(std::move(k)));
  ++generation_;
}

bool Registry::RetireOp(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(name);
  if (it == ops_.end()) return false;
  by_py_name_.erase(it->second->py_name);
  retired_ops_.push_back(std::move(it->second));
  ops_.erase(it);
  auto k = kernels_.find(name);
  if (k != kernels_.end()) {
    for (auto& e : k->second) retired_kernels_.push_back(std::move(e));
    kernels_.erase(k);
  }
  ++generation_;
  return true;
}

namespace {
int PopCount(DgDTypeMask m) { return __builtin_popcount(m); }

// The deterministic order, pins aside.
bool Before(const KernelEntry* a, const KernelEntry* b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  int pa = PopCount(a->dtypes), pb = PopCount(b->dtypes);
  if (pa != pb) return pa < pb;
  if (a->plugin != b->plugin) return a->plugin < b->plugin;
  return a->name < b->name;
}

bool PinMatches(const KernelEntry* k, const std::string& target) {
  return k->name == target || k->plugin == target;
}
}  // namespace

std::vector<const KernelEntry*> Registry::Order(const std::string& op,
                                                const std::string& device,
                                                DgDType dtype,
                                                std::string* pin_note) {
  // mu_ held by the caller.
  std::vector<const KernelEntry*> c;
  auto it = kernels_.find(op);
  if (it != kernels_.end())
    for (auto& k : it->second)
      if (k->device == device && (k->dtypes & DG_DTYPE_BIT(dtype)))
        c.push_back(k.get());
  std::sort(c.begin(), c.end(), Before);
  auto pin = pins_.find({op, device});
  if (pin != pins_.end()) {
    std::stable_partition(c.begin(), c.end(), [&](const KernelEntry* k) {
      return PinMatches(k, pin->second);
    });
    if (c.empty() || !PinMatches(c.front(), pin->second)) {
      throw CoreError(DG_FAILED_PRECONDITION,
                      dg::Str(op, " on ", device, " is pinned to '", pin->second,
                              "', which has no kernel for ", DTypeName(dtype),
                              " (pins never fall back; unpin or fix DRAGON_KERNEL_PIN)"));
    }
    if (pin_note) *pin_note = pin->second;
  }
  return c;
}

std::shared_ptr<const std::vector<const KernelEntry*>> Registry::Candidates(
    OpSchema& op, int32_t device_type, DgDType dtype) {
  uint64_t gen = generation_.load();
  {
    std::lock_guard<std::mutex> lock(op.cache_mu);
    if (static_cast<int32_t>(op.cache.size()) > device_type) {
      auto& slot = op.cache[device_type][dtype];
      if (slot.generation == gen) {
        if (!slot.error.empty())
          throw CoreError(DG_FAILED_PRECONDITION, slot.error);
        return slot.candidates;
      }
    }
  }
  std::string device = DeviceRegistry::Get().type(device_type).name;
  std::shared_ptr<std::vector<const KernelEntry*>> list;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      list = std::make_shared<std::vector<const KernelEntry*>>(
          Order(op.name, device, dtype, nullptr));
      if (list->size() >= 2) {
        const KernelEntry* a = (*list)[0];
        const KernelEntry* b = (*list)[1];
        bool pinned = pins_.count({op.name, device}) != 0;
        if (!pinned && a->plugin != b->plugin && a->priority == b->priority &&
            a->dtypes == b->dtypes) {
          error = dg::Str(
              "two plugins claim ", op.name, " on ", device, " for ",
              DTypeName(dtype), " with the same priority ", a->priority,
              " and dtypes: '", a->name, "' from ", a->plugin, " (",
              a->dist.empty() ? a->plugin : a->dist, ") and '", b->name,
              "' from ", b->plugin, " (", b->dist.empty() ? b->plugin : b->dist,
              "). Uninstall one, or choose with DRAGON_KERNEL_PIN=", op.name,
              ":", device, "=<plugin>");
        }
      }
    } catch (const CoreError& e) {
      error = e.what();
    }
  }
  std::lock_guard<std::mutex> lock(op.cache_mu);
  if (static_cast<int32_t>(op.cache.size()) <= device_type)
    op.cache.resize(device_type + 1);
  auto& slot = op.cache[device_type][dtype];
  slot.generation = gen;
  slot.candidates = list;
  slot.error = error;
  if (!error.empty()) throw CoreError(DG_FAILED_PRECONDITION, error);
  return slot.candidates;
}

std::string Registry::Explain(const std::string& op, const std::string& device,
                              DgDType dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "Kernel selection for " << op << " on " << device << " ("
     << DTypeName(dtype) << ")\n";
  if (!ops_.count(op)) os << "  note: no op named '" << op << "' is defined\n";
  std::string pin;
  std::vector<const KernelEntry*> c;
  try {
    c = Order(op, device, dtype, &pin);
  } catch (const CoreError& e) {
    os << "  error: " << e.what() << "\n";
    return os.str();
  }
  os << "  order: user pin > priority > dtype specificity > plugin name > kernel name\n";
  if (c.empty()) {
    os << "  no candidate. Registered kernels for " << op << ":\n";
    auto it = kernels_.find(op);
    if (it == kernels_.end() || it->second.empty()) os << "    (none)\n";
    else
      for (auto& k : it->second)
        os << "    " << k->name << " [" << k->plugin << "] device=" << k->device
           << " dtypes={" << MaskToString(k->dtypes) << "} priority=" << k->priority << "\n";
    return os.str();
  }
  for (size_t i = 0; i < c.size(); ++i) {
    const KernelEntry* k = c[i];
    os << (i == 0 ? "  * " : "    ") << i + 1 << ". " << k->name << " [plugin "
       << k->plugin << "] priority=" << k->priority << " dtypes={"
       << MaskToString(k->dtypes) << "}" << (k->supports ? " (has supports())" : "")
       << "\n";
  }
  const KernelEntry* w = c.front();
  os << "  winner: " << w->name << " from " << w->plugin << " because ";
  if (!pin.empty()) {
    os << "it is pinned ('" << pin << "')";
  } else if (c.size() == 1) {
    os << "it is the only candidate";
  } else {
    const KernelEntry* r = c[1];
    if (w->priority != r->priority)
      os << "its priority " << w->priority << " beats " << r->priority;
    else if (PopCount(w->dtypes) != PopCount(r->dtypes))
      os << "it is more dtype-specific (" << PopCount(w->dtypes) << " dtypes vs "
         << PopCount(r->dtypes) << ")";
    else if (w->plugin != r->plugin)
      os << "its plugin name sorts first ('" << w->plugin << "' < '" << r->plugin
         << "')";
    else
      os << "its kernel name sorts first";
  }
  os << "\n";
  return os.str();
}

void Registry::Pin(const std::string& op, const std::string& device,
                   const std::string& target) {
  std::lock_guard<std::mutex> lock(mu_);
  pins_[{op, device}] = target;
  ++generation_;
}

void Registry::Unpin(const std::string& op, const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  pins_.erase({op, device});
  ++generation_;
}

std::map<std::pair<std::string, std::string>, std::string> Registry::Pins() {
  std::lock_guard<std::mutex> lock(mu_);
  return pins_;
}

PluginRecord& Registry::AddPlugin(PluginRecord rec) {
  std::lock_guard<std::mutex> lock(mu_);
  plugins_.push_back(std::move(rec));
  return plugins_.back();
}

std::vector<PluginRecord> Registry::Plugins() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<PluginRecord>(plugins_.begin(), plugins_.end());
}

const PluginRecord* Registry::FindPlugin(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : plugins_)
    if (p.name == name && p.state == "loaded") return &p;
  return nullptr;
}

const PluginRecord* Registry::BrokenProvider(const std::string& op,
                                             const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : plugins_) {
    if (p.state != "broken") continue;
    for (auto& o : p.broken_ops)
      if (o == op) return &p;
    for (auto& k : p.broken_kernels)
      if (k.first == op && (device.empty() || k.second == device)) return &p;
  }
  return nullptr;
}

}  // namespace dragon
