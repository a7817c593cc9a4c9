// Tensor bindings: properties, NumPy interop, DLPack, device copies.
#include <cstring>

#include "../core/device.h"
#include "../core/stream.h"
#include "bindings.h"

namespace dragon {
namespace {

// ---- DLPack (v0.8 "dltensor" capsules), declared here in our own terms ----
struct DLDeviceT {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataTypeT {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensorT {
  void* data;
  DLDeviceT device;
  int32_t ndim;
  DLDataTypeT dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensorT {
  DLTensorT dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorT*);
};

// DLPack >= 1.0: versioned, with flags (bit 0: read-only).
struct DLPackVersionT {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersionedT {
  DLPackVersionT version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersionedT*);
  uint64_t flags;
  DLTensorT dl_tensor;
};

struct ExportCtx {
  Tensor tensor;
  Shape shape, strides;
};

void DeleteExport(DLManagedTensorT* m) {
  delete static_cast<ExportCtx*>(m->manager_ctx);
  delete m;
}

DLDataTypeT ToDL(DgDType t) {
  switch (t) {
    case DG_BOOL: return {6, 8, 1};
    case DG_UINT8: return {1, 8, 1};
    case DG_INT8: return {0, 8, 1};
    case DG_INT16: return {0, 16, 1};
    case DG_INT32: return {0, 32, 1};
    case DG_INT64: return {0, 64, 1};
    case DG_UINT16: return {1, 16, 1};
    case DG_UINT32: return {1, 32, 1};
    case DG_UINT64: return {1, 64, 1};
    case DG_FLOAT16: return {2, 16, 1};
    case DG_BFLOAT16: return {4, 16, 1};
    case DG_FLOAT32: return {2, 32, 1};
    default: return {2, 64, 1};
  }
}

DgDType FromDL(DLDataTypeT d) {
  if (d.lanes != 1) throw CoreError(DG_INVALID_ARGUMENT, "DLPack: vector dtypes are not supported");
  if (d.code == 6 && d.bits == 8) return DG_BOOL;
  if (d.code == 1) {
    if (d.bits == 8) return DG_UINT8;
    if (d.bits == 16) return DG_UINT16;
    if (d.bits == 32) return DG_UINT32;
    if (d.bits == 64) return DG_UINT64;
  }
  if (d.code == 0) {
    if (d.bits == 8) return DG_INT8;
    if (d.bits == 16) return DG_INT16;
    if (d.bits == 32) return DG_INT32;
    if (d.bits == 64) return DG_INT64;
  }
  if (d.code == 2) {
    if (d.bits == 16) return DG_FLOAT16;
    if (d.bits == 32) return DG_FLOAT32;
    if (d.bits == 64) return DG_FLOAT64;
  }
  if (d.code == 4 && d.bits == 16) return DG_BFLOAT16;
  throw CoreError(DG_INVALID_ARGUMENT,
                  dg::Str("DLPack: unsupported dtype (code ", int(d.code), ", bits ",
                          int(d.bits), ")"));
}

int32_t DeviceForDLPack(int32_t dl_type) {
  auto& reg = DeviceRegistry::Get();
  for (int32_t i = 0; i < reg.size(); ++i)
    if (reg.type(i).def.dlpack_device_type == dl_type) return i;
  throw CoreError(DG_NOT_FOUND,
                  dg::Str("DLPack: no registered device has DLPack device type ", dl_type));
}

void DeleteExportVersioned(DLManagedTensorVersionedT* m) {
  delete static_cast<ExportCtx*>(m->manager_ctx);
  delete m;
}

void FillDL(const Tensor& t, const DeviceType& dev, ExportCtx* ctx, DLTensorT* d) {
  d->data = t->storage()->data();
  d->byte_offset = static_cast<uint64_t>(t->byte_offset());
  d->device = {dev.def.dlpack_device_type, t->device().index};
  d->ndim = t->ndim();
  d->dtype = ToDL(t->dtype());
  d->shape = ctx->shape.data();
  d->strides = ctx->strides.data();
}

constexpr uint64_t kDLPackReadOnly = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY

py::capsule ToDLPack(const Tensor& t, bool versioned) {
  auto& dev = DeviceRegistry::Get().type(t->device().type);
  if (dev.def.dlpack_device_type == 0)
    throw CoreError(DG_UNIMPLEMENTED,
                    dg::Str("tensors on ", dev.name, " cannot be exported through DLPack"));
  const bool read_only = t->storage()->read_only();
  if (read_only && !versioned)
    // An unversioned capsule cannot say "read-only"; NumPy refuses the same.
    throw py::buffer_error(
        "__dlpack__: the tensor views read-only memory and a DLPack capsule older than 1.0 "
        "cannot mark it read-only; call __dlpack__(max_version=(1, 0)) or export a copy "
        "(dragon_core.tensor(x))");
  auto* ctx = new ExportCtx{t, t->shape(), t->strides()};
  if (versioned) {
    auto* m = new DLManagedTensorVersionedT{};
    m->version = {1, 0};
    m->flags = read_only ? kDLPackReadOnly : 0;
    FillDL(t, dev, ctx, &m->dl_tensor);
    m->manager_ctx = ctx;
    m->deleter = &DeleteExportVersioned;
    return py::capsule(m, "dltensor_versioned", [](PyObject* cap) {
      if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto* mt = static_cast<DLManagedTensorVersionedT*>(
            PyCapsule_GetPointer(cap, "dltensor_versioned"));
        if (mt && mt->deleter) mt->deleter(mt);
      }
    });
  }
  auto* m = new DLManagedTensorT{};
  FillDL(t, dev, ctx, &m->dl_tensor);
  m->manager_ctx = ctx;
  m->deleter = &DeleteExport;
  return py::capsule(m, "dltensor", [](PyObject* cap) {
    // Only delete if nobody consumed it (then it was renamed).
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* mt = static_cast<DLManagedTensorT*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (mt && mt->deleter) mt->deleter(mt);
    }
  });
}

Tensor FromDLPackCapsule(py::capsule cap) {
  DLTensorT* dp = nullptr;
  std::function<void()> release;
  bool read_only = false;
  if (PyCapsule_IsValid(cap.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersionedT*>(
        PyCapsule_GetPointer(cap.ptr(), "dltensor_versioned"));
    if (m->version.major > 1)
      throw CoreError(DG_UNIMPLEMENTED,
                      dg::Str("from_dlpack: DLPack version ", m->version.major, ".",
                              m->version.minor, " is newer than this core understands (1.x)"));
    PyCapsule_SetName(cap.ptr(), "used_dltensor_versioned");
    dp = &m->dl_tensor;
    read_only = (m->flags & kDLPackReadOnly) != 0;
    release = [m] { if (m->deleter) m->deleter(m); };
  } else if (PyCapsule_IsValid(cap.ptr(), "dltensor")) {
    auto* m = static_cast<DLManagedTensorT*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
    dp = &m->dl_tensor;
    release = [m] { if (m->deleter) m->deleter(m); };
  } else {
    throw CoreError(DG_INVALID_ARGUMENT,
                    "from_dlpack: expected an unconsumed 'dltensor' or 'dltensor_versioned' capsule");
  }
  DLTensorT& d = *dp;
  DgDType dtype;
  DgDevice device;
  try {
    dtype = FromDL(d.dtype);
    device = DgDevice{DeviceForDLPack(d.device.device_type), d.device.device_id};
  } catch (...) {
    release();
    throw;
  }
  Shape shape(d.shape, d.shape + d.ndim);
  Shape strides = d.strides ? Shape(d.strides, d.strides + d.ndim) : ContiguousStrides(shape);
  auto storage = Storage::Wrap(device, d.data, 0, [release] {
    py::gil_scoped_acquire gil;
    release();
  });
  storage->set_read_only(read_only);
  return std::make_shared<TensorImpl>(storage, static_cast<int64_t>(d.byte_offset), dtype,
                                      shape, strides);
}

// Autograd fields that hold Python objects; released with the GIL held.
struct AutogradMeta {
  py::object grad;
  py::object grad_fn;
  ~AutogradMeta() {
    if (!Py_IsInitialized()) {
      grad.release();
      grad_fn.release();
      return;
    }
    py::gil_scoped_acquire gil;
    grad = py::object();
    grad_fn = py::object();
  }
};

// Makes `self` view `other`'s storage and metadata, keeping its identity
// (uid) and autograd state: what assign and `.data =` do.
void Rebind(TensorImpl& self, const Tensor& other) {
  bool requires_grad = self.requires_grad;
  auto autograd = self.autograd;
  uint64_t uid = self.uid;
  const int64_t version = self.version() + 1;
  self = TensorImpl(other->storage(), other->byte_offset(), other->dtype(), other->shape(),
                    other->strides());
  self.uid = uid;
  self.requires_grad = requires_grad;
  self.autograd = autograd;
  self.version_offset = version - self.storage()->version;
}

AutogradMeta* Meta(TensorImpl& t) {
  if (!t.autograd) t.autograd = std::make_shared<AutogradMeta>();
  return static_cast<AutogradMeta*>(t.autograd.get());
}

}  // namespace

DgDType DTypeFromNumpy(const py::dtype& dt) {
  char kind = dt.kind();
  auto size = dt.itemsize();
  if (kind == 'b') return DG_BOOL;
  if (kind == 'u') {
    if (size == 1) return DG_UINT8;
    if (size == 2) return DG_UINT16;
    if (size == 4) return DG_UINT32;
    if (size == 8) return DG_UINT64;
  }
  if (kind == 'i') {
    if (size == 1) return DG_INT8;
    if (size == 2) return DG_INT16;
    if (size == 4) return DG_INT32;
    if (size == 8) return DG_INT64;
  }
  if (kind == 'f') {
    if (size == 2) return DG_FLOAT16;
    if (size == 4) return DG_FLOAT32;
    if (size == 8) return DG_FLOAT64;
  }
  std::string name = py::str(dt.attr("name"));
  if (name == "bfloat16") return DG_BFLOAT16;
  throw CoreError(DG_INVALID_ARGUMENT,
                  dg::Str("NumPy dtype '", name, "' has no Dragon equivalent (supported: ",
                          MaskToString(DG_MASK_ANY), ")"));
}

py::dtype NumpyFromDType(DgDType t) {
  if (t == DG_BFLOAT16) {
    try {
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
    } catch (py::error_already_set&) {
      throw CoreError(DG_UNIMPLEMENTED,
                      "bfloat16 tensors need the ml_dtypes package for NumPy interop "
                      "(pip install ml_dtypes)");
    }
  }
  return py::dtype(dg::DTypeName(t));
}

namespace {

// "big-endian" / "little-endian" for a NumPy byte-order character.
std::string ByteOrderName(char order) {
  if (order == '>') return "big-endian";
  if (order == '<') return "little-endian";
  return dg::Str("'", order, "'");
}

bool HasFlag(const py::array& arr, int flag) {
  return (py::detail::array_proxy(arr.ptr())->flags & flag) != 0;
}

// The name of the capsule that a NumPy view of a tensor (ToNumpy) keeps
// as its base: it holds a std::shared_ptr<Storage>.
constexpr const char* kStorageCapsule = "dragon_core.storage";

// The storage behind `arr` when `arr` views one of our tensors' memory (its
// base chain ends in a storage capsule) with the same writability; else null.
std::shared_ptr<Storage> StorageOfNumpyView(const py::array& arr) {
  py::object base = arr.attr("base");
  for (int depth = 0; depth < 64 && !base.is_none(); ++depth) {
    PyObject* p = base.ptr();
    if (PyCapsule_CheckExact(p)) {
      if (!PyCapsule_IsValid(p, kStorageCapsule)) return nullptr;
      auto* keep = static_cast<std::shared_ptr<Storage>*>(PyCapsule_GetPointer(p, kStorageCapsule));
      const auto& st = *keep;
      if (!st || st->read_only() != !arr.writeable()) return nullptr;
      if (st->device().type != kHost.type) return nullptr;
      const char* lo = static_cast<const char*>(st->data());
      const char* d = static_cast<const char*>(arr.data());
      if (d < lo || (st->bytes() != 0 && d > lo + st->bytes())) return nullptr;
      return st;
    }
    if (!py::isinstance<py::array>(base)) return nullptr;
    base = base.attr("base");
  }
  return nullptr;
}

}  // namespace

Tensor FromNumpy(py::array arr, bool copy) {
  DgDType dtype = DTypeFromNumpy(arr.dtype());
  if (!copy && !arr.dtype().attr("isnative").cast<bool>()) {
    // A view cannot reorder bytes: kernels read memory in the machine's order.
    const char order = arr.dtype().attr("byteorder").cast<std::string>()[0];
    const char* native = py::module_::import("sys").attr("byteorder").cast<std::string>() ==
                                 "little"
                             ? "little-endian"
                             : "big-endian";
    throw CoreError(
        DG_INVALID_ARGUMENT,
        dg::Str("from_numpy: the array has ", ByteOrderName(order), " byte order (dtype '",
                py::str(arr.dtype().attr("str")).cast<std::string>(), "'), this machine is ",
                native, "; a zero-copy tensor cannot honour a non-native byte order. Use "
                "dg.tensor(arr) (copies) or arr.astype(arr.dtype.newbyteorder('=')) first"));
  }
  const int32_t ndim = static_cast<int32_t>(arr.ndim());
  Shape shape(ndim), strides(ndim);
  const int64_t item = static_cast<int64_t>(arr.itemsize());
  bool aligned = true;
  for (int32_t i = 0; i < ndim; ++i) {
    shape[i] = arr.shape(i);
    if (arr.strides(i) % item != 0) aligned = false;
    strides[i] = arr.strides(i) / item;
  }
  // A misaligned base address (np.frombuffer at an odd offset) would break
  // kernels' typed loads: such arrays are copied too.
  if (!HasFlag(arr, py::detail::npy_api::NPY_ARRAY_ALIGNED_)) aligned = false;
  if (!aligned || copy) {
    auto t = TensorImpl::Empty(kHost, dtype, shape);
    // Let NumPy do the (possibly strided) copy into our buffer.
    py::array dst = ToNumpy(t);
    py::module_::import("numpy").attr("copyto")(dst, arr, "unsafe");
    return t;
  }
  if (auto base = StorageOfNumpyView(arr)) {
    // A NumPy view of one of our tensors (x.numpy()[1:], np.transpose(...)):
    // the tensor shares the original storage (and so its version counter).
    const int64_t offset = static_cast<const char*>(arr.data()) -
                           static_cast<const char*>(base->data());
    return std::make_shared<TensorImpl>(base, offset, dtype, shape, strides);
  }
  py::object owner = arr;
  auto storage = Storage::Wrap(kHost, const_cast<void*>(arr.data()), 0, [owner]() mutable {
    py::gil_scoped_acquire gil;
    owner = py::object();
  });
  // Read-only memory (immutable bytes, a read-only memmap) stays read-only.
  storage->set_read_only(!arr.writeable());
  return std::make_shared<TensorImpl>(storage, 0, dtype, shape, strides);
}

py::array ToNumpy(const Tensor& t) {
  auto& dev = DeviceRegistry::Get().type(t->device().type);
  if (!dev.def.host_accessible)
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("numpy(): the tensor is on ", DeviceRegistry::Get().Name(t->device()),
                            "; copy it to the host first with .cpu()"));
  std::vector<py::ssize_t> shape(t->shape().begin(), t->shape().end());
  std::vector<py::ssize_t> strides(t->ndim());
  for (int32_t i = 0; i < t->ndim(); ++i)
    strides[i] = static_cast<py::ssize_t>(t->strides()[i] * static_cast<int64_t>(t->itemsize()));
  auto* keep = new std::shared_ptr<Storage>(t->storage());
  py::capsule base(keep, kStorageCapsule, [](PyObject* cap) {
    delete static_cast<std::shared_ptr<Storage>*>(PyCapsule_GetPointer(cap, kStorageCapsule));
  });
  py::array a(NumpyFromDType(t->dtype()), shape, strides, t->data(), base);
  // NumPy refuses to make it writable again: its base exposes no buffer.
  if (t->storage()->read_only())
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

void BindTensor(py::module_& m) {
  py::class_<TensorImpl, std::shared_ptr<TensorImpl>> cls(m, "Tensor");
  cls.def(py::init([](py::object data, py::object dtype, py::object device) {
            py::object t = Hooks().convert(data, dtype, device);
            auto impl = t.cast<Tensor>();
            return std::make_shared<TensorImpl>(*impl);
          }),
          py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
          "Create a tensor from a NumPy array, a (nested) list, a scalar or a tensor.");
  cls.def_property_readonly("shape", [](const TensorImpl& t) {
    py::tuple out(t.ndim());
    for (int32_t i = 0; i < t.ndim(); ++i) out[i] = py::int_(t.shape()[i]);
    return out;
  });
  cls.def_property_readonly("strides", [](const TensorImpl& t) {
    py::tuple out(t.ndim());
    for (int32_t i = 0; i < t.ndim(); ++i) out[i] = py::int_(t.strides()[i]);
    return out;
  }, "Strides in elements.");
  cls.def_property_readonly("ndim", &TensorImpl::ndim);
  cls.def_property_readonly("size", &TensorImpl::numel, "Number of elements.");
  cls.def("numel", &TensorImpl::numel);
  cls.def("__len__", [](const TensorImpl& t) {
    if (t.ndim() == 0) throw py::type_error("len() of a 0-d tensor");
    return t.shape()[0];
  });
  cls.def_property_readonly("_dtype_code", &TensorImpl::dtype);
  cls.def_property_readonly("_device_name", [](const TensorImpl& t) {
    return DeviceRegistry::Get().type(t.device().type).name;
  });
  cls.def_property_readonly("_device_index", [](const TensorImpl& t) { return t.device().index; });
  cls.def_property_readonly("itemsize", &TensorImpl::itemsize);
  cls.def_property_readonly("nbytes", [](const TensorImpl& t) {
    return t.numel() * static_cast<int64_t>(t.itemsize());
  });
  cls.def("is_contiguous", &TensorImpl::is_contiguous);
  cls.def("_is_channels_last", &TensorImpl::is_channels_last,
          "Whether the strides are those of the dense channels-last layout (rank 4 or 5).");
  cls.def("data_ptr", [](const TensorImpl& t) { return reinterpret_cast<uintptr_t>(t.data()); });
  // A writable view handed to the caller: writes through it bypass the
  // version counter (Storage::exported).
  const auto export_view = [](const Tensor& t) {
    if (!t->storage()->read_only()) t->storage()->exported = true;
    return ToNumpy(t);
  };
  cls.def("numpy", export_view,
          "A NumPy view of a host tensor (zero-copy; writes are shared). It is read-only "
          "when the tensor views read-only memory (see ``Tensor.is_read_only``).");
  cls.def_property_readonly("is_read_only", [](const TensorImpl& t) {
    return t.storage()->read_only();
  }, "True when the tensor views read-only memory (from_numpy of a read-only array, or a "
     "DLPack tensor flagged read-only): its NumPy views are read-only and nothing writes it.");
  cls.def("__array__", [](const Tensor& t, py::object dtype, py::object copy) {
            py::array a = ToNumpy(t);
            if (!dtype.is_none()) return py::array(a.attr("astype")(dtype));
            if (!copy.is_none() && copy.cast<bool>()) return py::array(a.attr("copy")());
            if (!t->storage()->read_only()) t->storage()->exported = true;
            return a;
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none());
  cls.def("__dlpack__", [](const Tensor& t, py::kwargs kw) {
    bool versioned = false;
    if (kw.contains("max_version") && !kw["max_version"].is_none()) {
      py::tuple v = py::reinterpret_borrow<py::tuple>(kw["max_version"]);
      versioned = v.size() > 0 && v[0].cast<int>() >= 1;
    }
    // ABI 1.3: order the consumer's stream after the producer (stream.h).
    bool has_stream = kw.contains("stream") && !kw["stream"].is_none();
    PrepareExport(*t->storage(), has_stream, has_stream ? kw["stream"].cast<intptr_t>() : 0);
    if (!t->storage()->read_only()) t->storage()->exported = true;
    return ToDLPack(t, versioned);
  });
  cls.def("__dlpack_device__", [](const Tensor& t) {
    auto& dev = DeviceRegistry::Get().type(t->device().type);
    return py::make_tuple(dev.def.dlpack_device_type, t->device().index);
  });
  cls.def("__hash__", [](py::handle self) { return py::hash(py::int_(reinterpret_cast<uintptr_t>(self.ptr()))); });
  cls.def("_to_device", [](const Tensor& t, const std::string& spec) {
    DgDevice d = DeviceRegistry::Get().Parse(spec);
    if (SameDevice(d, t->device())) return t;
    return CopyTo(t, d);
  });
  cls.def_property_readonly("_version", [](const TensorImpl& t) { return t.version(); },
      "Version counter (PyTorch's ``_version``): the number of in-place writes to this "
      "tensor's memory (shared with its views) and of rebinds (assign, ``.data =``).");
  cls.def_property_readonly("_written_unversioned", [](const TensorImpl& t) {
    const auto& st = *t.storage();
    return !st.read_only() && (st.external() || st.exported);
  }, "True when this tensor's memory can be written without the version counter seeing "
     "it: NumPy/DLPack-owned bytes, or memory a writable NumPy/DLPack view was handed "
     "out for. Autograd then never trusts an unchanged ``_version``.");
  cls.def("_bump_version", [](const TensorImpl& t) { ++t.storage()->version; },
          "Record an in-place write to this tensor's memory (every view sees it).");
  cls.def_property_readonly("_storage_refs", [](const TensorImpl& t) {
    return static_cast<int64_t>(t.storage().use_count());
  }, "How many tensors and NumPy views hold this tensor's storage (itself included).");
  cls.def("_same_storage", [](const TensorImpl& a, const TensorImpl& b) {
    return a.storage() == b.storage();
  });

  // ---- autograd state (the engine is Python: dragon_core/_autograd.py) ----
  cls.def_property("requires_grad",
      [](const TensorImpl& t) { return t.requires_grad; },
      [](TensorImpl& t, bool v) {
        if (v && !(DG_MASK_FLOAT & DG_DTYPE_BIT(t.dtype())))
          throw CoreError(DG_INVALID_ARGUMENT,
                          dg::Str("only floating-point tensors can require gradients, got ",
                                  DTypeName(t.dtype())));
        t.requires_grad = v;
      }, "Whether operations on this tensor are recorded for .backward().");
  cls.def_property("grad",
      [](const TensorImpl& t) -> py::object {
        auto* m = static_cast<AutogradMeta*>(t.autograd.get());
        return (m && m->grad) ? m->grad : py::none();
      },
      [](TensorImpl& t, py::object g) { Meta(t)->grad = g.is_none() ? py::object() : g; },
      "The gradient accumulated by .backward() (None until then).");
  cls.def_property("_grad_fn",
      [](const TensorImpl& t) -> py::object {
        auto* m = static_cast<AutogradMeta*>(t.autograd.get());
        return (m && m->grad_fn) ? m->grad_fn : py::none();
      },
      [](TensorImpl& t, py::object g) { Meta(t)->grad_fn = g.is_none() ? py::object() : g; });
  cls.def_property_readonly("_id", [](const TensorImpl& t) {
    return t.uid;
  }, "Identity of the tensor: unique for the life of the process (kept by assign).");
  cls.def("_clone", [](const Tensor& t) { return CopyTo(t, t->device()); },
          "A dense copy on the same device, without autograd state.");
  cls.def("_alias", [](const Tensor& t) {
    return std::make_shared<TensorImpl>(t->storage(), t->byte_offset(), t->dtype(), t->shape(),
                                        t->strides());
  }, "A new tensor sharing storage, without autograd state.");
  m.def("_set_grad_enabled", [](bool v) {
    bool old = Grad().enabled;
    Grad().enabled = v;
    return old;
  });
  m.def("_is_grad_enabled", [] { return Grad().enabled; });
  m.def("_tape_enter", [] { ++Grad().tapes; });
  m.def("_tape_exit", [] { if (Grad().tapes > 0) --Grad().tapes; });
  m.def("_set_record_hook", [](py::object f) { Hooks().record = f; });
  m.def("_set_trace_hook", [](py::object f) { Hooks().trace = f; });
  m.def("_trace_enter", [] { ++Grad().tracing; });
  m.def("_is_tracing", [] { return Grad().tracing > 0; });
  m.def("_trace_exit", [] { if (Grad().tracing > 0) --Grad().tracing; });
  cls.def("_rebind", [](TensorImpl& self, const Tensor& other) {
    if (!SameDevice(self.device(), other->device()))
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("assign: the value is on ", DeviceRegistry::Get().Name(other->device()),
                              ", the tensor on ", DeviceRegistry::Get().Name(self.device())));
    if (self.dtype() != other->dtype() || self.shape() != other->shape())
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("assign: the value is ", DTypeName(other->dtype()),
                              ShapeToString(other->shape()), ", the tensor is ",
                              DTypeName(self.dtype()), ShapeToString(self.shape())));
    Rebind(self, other);
  }, "Make this tensor refer to `other`'s storage and metadata (used by assign).");

  cls.def("_set_data", [](TensorImpl& self, const Tensor& other) {
    auto& reg = DeviceRegistry::Get();
    if (!SameDevice(self.device(), other->device()) || self.dtype() != other->dtype())
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("Tensor.data: the new value is ", DTypeName(other->dtype()),
                              ShapeToString(other->shape()), " on ", reg.Name(other->device()),
                              ", the tensor is ", DTypeName(self.dtype()),
                              ShapeToString(self.shape()), " on ", reg.Name(self.device()),
                              "; .data takes the same dtype and device (use .to(...) first)"));
    Rebind(self, other);
  }, "Make this tensor view `other`'s storage (any shape; same dtype and device).");

  m.def("from_numpy", [](py::array arr) { return FromNumpy(arr, false); },
        "A zero-copy tensor over a host NumPy array (any strides).");
  // A tensor made from host data while a function is traced is one of the
  // trace's constants (docs/graph.md), whoever makes it: dragon_core.tensor,
  // a front end's creation function (vm.torch's arange, ...).
  m.def("_from_numpy_copy", [](py::array arr) {
    auto t = FromNumpy(arr, true);
    if (Grad().tracing > 0 && Hooks().created) Hooks().created(t);
    return t;
  });
  m.def("_set_created_hook", [](py::object f) { Hooks().created = f; });
  m.def("_from_dlpack_capsule", [](py::capsule c) { return FromDLPackCapsule(c); });
}

}  // namespace dragon
